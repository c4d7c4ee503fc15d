package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestRetentionWithRealPeers: a federation whose first peer registered a
// retention of 1 s (r-c offers no machine and submits nothing). Each organisation's finished tasks leave the state of
// every peer (the same entry: every peer ends at the same hash, and the
// history names the forget_tasks' index, which every peer has applied),
// the energy accounts do not move, and each task is in `peer history` on
// its organisation's peer, nowhere else. Another organisation's history is
// refused, and so is a request without the token.
func TestRetentionWithRealPeers(t *testing.T) {
	peers := federation(t, "sim", []string{"r-a", "r-b", "r-c"}, map[string]string{
		"r-a": simMachine("a1", 10, 100),
		"r-b": simMachine("b1", 10, 100),
	}, map[string]func(*config.Config){"r-a": func(c *config.Config) { c.Consensus.RetentionAfter = time.Second }})
	a, b, c := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var rules ledger.Rules
	a.n.cons.View(func(l *ledger.Ledger) { rules, _ = l.Rules() })
	if rules.Retention == nil || rules.Retention.AfterMs != 1000 {
		t.Fatalf("the federation's rules %+v: want a 1 s retention", rules)
	}

	submit := func(tn *tnode, job string, n int) []string {
		req := api.SubmitRequest{Job: job}
		for range n {
			req.Tasks = append(req.Tasks, api.SubmitTask{Argv: []string{"true"}, SizeMFlop: 100})
		}
		resp, err := tn.n.Submit(ctx, req)
		if err != nil {
			t.Fatalf("%s submits: %v", tn.org, err)
		}
		return resp.TaskIDs
	}
	idsA := submit(a, "ja", 3)
	idsB := submit(b, "jb", 2)
	all := append(append([]string(nil), idsA...), idsB...)
	// Every task finishes, then leaves every peer's state.
	for _, tn := range peers {
		for _, id := range all {
			waitFor(t, 25*time.Second, id+" gone from "+tn.org, func() bool {
				_, ok := func() (ledger.Task, bool) {
					var tk ledger.Task
					var ok bool
					tn.n.cons.View(func(l *ledger.Ledger) { tk, ok = l.Task(id) })
					return tk, ok
				}()
				return !ok
			})
		}
	}

	// r-a's history holds its tasks, done, with their runs and energy.
	p, err := a.n.History(ctx, api.HistoryQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != len(idsA) {
		t.Fatalf("r-a's history: %d records, want %d", len(p.Records), len(idsA))
	}
	var forgottenAt uint64
	var energyJ float64
	for i, r := range p.Records {
		if r.ID != idsA[i] || r.State != "done" || r.Job != "ja" || len(r.Segments) != 1 || r.ForgottenIndex == 0 {
			t.Fatalf("record %d: %+v", i, r)
		}
		forgottenAt = max(forgottenAt, r.ForgottenIndex)
		energyJ += r.Segments[0].EnergyJ
	}
	// r-b's are on r-b's peer; r-c submitted nothing.
	if p, err := b.n.History(ctx, api.HistoryQuery{Job: "jb", Limit: 100}); err != nil || len(p.Records) != len(idsB) {
		t.Fatalf("r-b's history: %+v, %v", p, err)
	}
	if p, err := c.n.History(ctx, api.HistoryQuery{Limit: 100}); err != nil || len(p.Records) != 0 {
		t.Fatalf("r-c's history: %+v, %v", p, err)
	}

	// Every peer applied the forget and holds the same state; the energy
	// accounts still count the forgotten runs.
	waitFor(t, 20*time.Second, "every peer at the same index", func() bool {
		_, i0 := a.n.cons.Hash()
		for _, tn := range peers {
			if _, i := tn.n.cons.Hash(); i != i0 || i < forgottenAt {
				return false
			}
		}
		return true
	})
	h0, _ := a.n.cons.Hash()
	for _, tn := range peers {
		if h, _ := tn.n.cons.Hash(); h != h0 {
			t.Fatalf("%s hash %s, r-a's %s", tn.org, h, h0)
		}
		var o ledger.OrgInfo
		var f ledger.ForgottenTotals
		tn.n.cons.View(func(l *ledger.Ledger) {
			o = l.Orgs()[0]
			f = l.Forgotten("r-a")
		})
		if o.Name != "r-a" || o.Done != 0 || f.Tasks != int64(len(idsA)) || float64(o.Energy.UserMilliJ)/1000 != energyJ || f.Energy.UserMilliJ != o.Energy.UserMilliJ {
			t.Fatalf("%s: r-a %+v, forgotten %+v, history energy %g J", tn.org, o, f, energyJ)
		}
	}

	// Who may not: another organisation's history, and no token.
	var ae *api.Error
	if _, err := a.n.History(ctx, api.HistoryQuery{Org: "r-b", Limit: 10}); !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("r-a asked for r-b's history: %v", err)
	}
	srv := httptest.NewServer(api.NewServer(a.n, api.ServerOptions{Token: "secret-token"}))
	defer srv.Close()
	for _, tc := range []struct {
		token, query string
		status       int
		code         string
	}{
		{"", "", http.StatusUnauthorized, api.CodeUnauthorized},
		{"wrong", "", http.StatusUnauthorized, api.CodeUnauthorized},
		{"secret-token", "?org=r-b", http.StatusForbidden, api.CodeForbidden},
		{"secret-token", "?state=running", http.StatusBadRequest, api.CodeBadRequest},
		{"secret-token", "?limit=10001", http.StatusBadRequest, api.CodeBadRequest},
		{"secret-token", "?from_ms=5&to_ms=4", http.StatusBadRequest, api.CodeBadRequest},
		{"secret-token", "?after=x", http.StatusBadRequest, api.CodeBadRequest},
		{"secret-token", "?bogus=1", http.StatusBadRequest, api.CodeBadRequest},
	} {
		cl := api.NewClient(srv.URL, tc.token, nil)
		_, err := cl.History(ctx, api.HistoryQuery{})
		if tc.query != "" {
			err = rawGet(ctx, srv.URL+"/v1/history"+tc.query, tc.token)
		}
		if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
			t.Errorf("token %q query %q: %v, want %d %s", tc.token, tc.query, err, tc.status, tc.code)
		}
	}
	cl := api.NewClient(srv.URL, "secret-token", nil)
	if p, err := cl.History(ctx, api.HistoryQuery{Limit: 2}); err != nil || len(p.Records) != 2 || p.Next == 0 {
		t.Fatalf("first page over HTTP: %+v, %v", p, err)
	} else if p2, err := cl.History(ctx, api.HistoryQuery{Limit: 2, After: p.Next}); err != nil || len(p2.Records) != 1 || p2.Next != 0 || p2.Records[0].ID != idsA[2] {
		t.Fatalf("second page over HTTP: %+v, %v", p2, err)
	}
}

// rawGet sends GET url with the token and returns the API error, if any.
func rawGet(ctx context.Context, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Error api.Error `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	body.Error.Status = resp.StatusCode
	return &body.Error
}
