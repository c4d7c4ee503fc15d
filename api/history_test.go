package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
)

// TestTasksPages: limit and after walk the task list in pages without
// gaps or repeats; without a limit the whole list comes back, as before.
func TestTasksPages(t *testing.T) {
	_, srv := serve(t, api.ServerOptions{})
	c := api.NewClient(srv.URL, token, nil)
	ctx := context.Background()
	all, err := c.Tasks(ctx, api.TaskQuery{})
	if err != nil || len(all) < 3 {
		t.Fatalf("whole list: %d tasks, %v", len(all), err)
	}
	var paged []string
	q := api.TaskQuery{Limit: 2}
	for range len(all) + 1 {
		page, err := c.Tasks(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, tv := range page {
			paged = append(paged, tv.ID)
		}
		if len(page) < q.Limit {
			break
		}
		q.After = page[len(page)-1].Seq
	}
	if len(paged) != len(all) {
		t.Fatalf("pages gave %v, the whole list %d tasks", paged, len(all))
	}
	for i, tv := range all {
		if paged[i] != tv.ID || tv.Seq == 0 {
			t.Fatalf("page order %v differs from the list at %d (%s, seq %d)", paged, i, tv.ID, tv.Seq)
		}
	}
	if r := call(t, srv, http.MethodGet, "/v1/tasks?after=-1", ""); r.status != http.StatusBadRequest {
		t.Fatalf("after=-1: %d %s", r.status, r.body)
	}
}

// TestHistoryBadInput: the history route refuses a bad query before the
// backend sees it, each with its stable code, and a backend without a
// history answers not_found.
func TestHistoryBadInput(t *testing.T) {
	_, srv := serve(t, api.ServerOptions{})
	for _, tc := range []struct {
		query  string
		status int
		code   string
		msg    string
	}{
		{"?state=queued", http.StatusBadRequest, api.CodeBadRequest, "finished tasks only"},
		{"?limit=0x1", http.StatusBadRequest, api.CodeBadRequest, "whole number"},
		{"?limit=-1", http.StatusBadRequest, api.CodeBadRequest, "want 1 to 10000"},
		{"?from_ms=10&to_ms=5", http.StatusBadRequest, api.CodeBadRequest, "time range"},
		{"?from_ms=yesterday", http.StatusBadRequest, api.CodeBadRequest, "Unix milliseconds"},
		{"?after=-3", http.StatusBadRequest, api.CodeBadRequest, "cursor"},
		{"?org=..", http.StatusBadRequest, api.CodeBadRequest, "not an organisation name"},
		{"?color=red", http.StatusBadRequest, api.CodeBadRequest, "unknown query parameter"},
		{"", http.StatusNotFound, api.CodeNotFound, "keeps no history"},
	} {
		r := call(t, srv, http.MethodGet, "/v1/history"+tc.query, "")
		var body struct{ Error api.Error }
		_ = json.Unmarshal(r.body, &body)
		if r.status != tc.status || body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.msg) {
			t.Errorf("%q: %d %s, want %d %s (%q)", tc.query, r.status, r.body, tc.status, tc.code, tc.msg)
		}
	}
	if r := call(t, srv, http.MethodGet, "/v1/history", "", "-"); r.status != http.StatusUnauthorized {
		t.Errorf("without a token: %d", r.status)
	}
	if r := call(t, srv, http.MethodPost, "/v1/history", ""); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", r.status)
	}
}
