package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/node/nodetest"
)

// badState is what a refused request must leave alone: the ledger's state
// hash and, for requests refused before they reach the log, the applied
// index.
type badState struct {
	hash  string
	index uint64
}

func ledgerState(t *testing.T, p *nodetest.Peer) badState {
	t.Helper()
	req, _ := http.NewRequest("GET", p.URL+"/v1/ledger", nil)
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v api.LedgerView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 || v.StateHash == "" {
		t.Fatalf("GET /v1/ledger: status %d, %v", resp.StatusCode, err)
	}
	// The API's view must be the consensus layer's.
	if h, i := p.Node.Consensus().Hash(); h != v.StateHash || i < v.AppliedIndex {
		t.Fatalf("API says %s@%d, consensus %s@%d", v.StateHash, v.AppliedIndex, h, i)
	}
	return badState{v.StateHash, v.AppliedIndex}
}

// badResult is the status and the JSON error code of one response.
type badResult struct {
	status int
	code   string
}

func readBadResult(t *testing.T, resp *http.Response) badResult {
	t.Helper()
	defer resp.Body.Close()
	var eb struct {
		Error *api.Error `json:"error"`
	}
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil || eb.Error.Message == "" {
		return badResult{status: resp.StatusCode}
	}
	return badResult{resp.StatusCode, eb.Error.Code}
}

// rawRequest sends head (request line and headers, without the blank line)
// and body over a plain TCP connection: it can declare a Content-Length
// the body does not have.
func rawRequest(t *testing.T, url, head, body string) badResult {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return readBadResult(t, resp)
}

// TestBadInputLeavesStateUnchanged sends a real single-peer federation's
// API every kind of bad request of issue 7: each gets its stable error code,
// and the ledger's state hash does not move. Requests refused before they
// reach the log leave the applied index too; those the ledger itself
// refuses (cancelling a task it does not hold) take a log entry that
// changes nothing.
func TestBadInputLeavesStateUnchanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := nodetest.Start(ctx, t)

	task := func(fields string) string {
		return `{"tasks":[{"argv":["/bin/sh","-c","true"],` + fields + `}]}`
	}
	okTask := task(`"size_mflop":1000,"wall_limit_ms":60000`)
	const (
		noAuth    = "-"
		wrongAuth = "Bearer not-the-token"
	)
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name         string
		method, path string
		body         string
		auth         string // "" = the right token
		chunked      bool   // send without a Content-Length
		want         badResult
		logged       bool // the ledger refuses it: the applied index may move
	}{
		// Authentication.
		{name: "submit without token", method: "POST", path: "/v1/tasks", body: okTask, auth: noAuth, want: badResult{401, api.CodeUnauthorized}},
		{name: "submit with wrong token", method: "POST", path: "/v1/tasks", body: okTask, auth: wrongAuth, want: badResult{401, api.CodeUnauthorized}},
		{name: "submit with the token as Basic", method: "POST", path: "/v1/tasks", body: okTask, auth: "Basic " + "x", want: badResult{401, api.CodeUnauthorized}},
		{name: "limit with wrong token", method: "PUT", path: "/v1/limit", body: `{"watts":1}`, auth: wrongAuth, want: badResult{401, api.CodeUnauthorized}},
		{name: "cancel without token", method: "POST", path: "/v1/tasks/alpha-1/cancel", auth: noAuth, want: badResult{401, api.CodeUnauthorized}},
		{name: "leave with wrong token", method: "POST", path: "/v1/leave", auth: wrongAuth, want: badResult{401, api.CodeUnauthorized}},
		{name: "ledger read without token", method: "GET", path: "/v1/ledger", auth: noAuth, want: badResult{401, api.CodeUnauthorized}},

		// Oversized bodies (the declared-length case is below, over raw TCP).
		{name: "limit body one byte over", method: "PUT", path: "/v1/limit", body: `{"watts":1}` + strings.Repeat(" ", api.DefaultMaxBodyBytes+1-len(`{"watts":1}`)), want: badResult{413, api.CodeTooLarge}},
		{name: "limit body over, chunked", method: "PUT", path: "/v1/limit", body: `{"watts":1` + strings.Repeat(" ", api.DefaultMaxBodyBytes) + `}`, chunked: true, want: badResult{413, api.CodeTooLarge}},
		{name: "cancel body over", method: "POST", path: "/v1/tasks/alpha-1/cancel", body: `{` + strings.Repeat(" ", api.DefaultMaxBodyBytes) + `}`, want: badResult{413, api.CodeTooLarge}},

		// Malformed JSON.
		{name: "submit cut short", method: "POST", path: "/v1/tasks", body: `{"tasks":[`, want: badResult{400, api.CodeBadRequest}},
		{name: "submit empty body", method: "POST", path: "/v1/tasks", body: ``, want: badResult{400, api.CodeBadRequest}},
		{name: "submit not an object", method: "POST", path: "/v1/tasks", body: `[1,2]`, want: badResult{400, api.CodeBadRequest}},
		{name: "submit not JSON", method: "POST", path: "/v1/tasks", body: "tasks:\n  - argv: [/bin/true]\n", want: badResult{400, api.CodeBadRequest}},
		{name: "submit trailing object", method: "POST", path: "/v1/tasks", body: okTask + okTask, want: badResult{400, api.CodeBadRequest}},
		{name: "limit missing value", method: "PUT", path: "/v1/limit", body: `{"watts":}`, want: badResult{400, api.CodeBadRequest}},
		{name: "limit invalid UTF-8 key", method: "PUT", path: "/v1/limit", body: "{\"w\xffatts\":1}", want: badResult{400, api.CodeBadRequest}},

		// Deeply nested JSON: the decoder's depth bound, never a stack
		// overflow.
		{name: "submit nested 100000 deep", method: "POST", path: "/v1/tasks", body: `{"tasks":` + deep(100_000) + `}`, want: badResult{400, api.CodeBadRequest}},
		{name: "submit env nested", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1,"wall_limit_ms":1,"env":{"A":` + deep(5000) + `}`), want: badResult{400, api.CodeBadRequest}},
		{name: "limit nested 30000 deep", method: "PUT", path: "/v1/limit", body: `{"watts":` + deep(30_000) + `}`, want: badResult{400, api.CodeBadRequest}},

		// Unknown fields.
		{name: "submit unknown top-level field", method: "POST", path: "/v1/tasks", body: `{"tasks":[{"argv":["/bin/true"],"size_mflop":1,"wall_limit_ms":1}],"priority":9}`, want: badResult{400, api.CodeBadRequest}},
		{name: "submit unknown task field", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1,"wall_limit_ms":1,"priority":1`), want: badResult{400, api.CodeBadRequest}},
		// Issue 14: a request no machine of the federation can hold, and a
		// malformed requirement.
		{name: "submit gpus no machine has", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1,"wall_limit_ms":1,"gpus":1`), want: badResult{409, api.CodeConflict}},
		{name: "submit bad requirement", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1,"wall_limit_ms":1,"requirements":[{"attribute":"colour","operator":"="}]`), want: badResult{400, api.CodeBadRequest}},
		{name: "submit org field (acting as another organisation)", method: "POST", path: "/v1/tasks", body: `{"org":"beta","tasks":[{"argv":["/bin/true"],"size_mflop":1,"wall_limit_ms":1}]}`, want: badResult{400, api.CodeBadRequest}},
		{name: "limit unknown field", method: "PUT", path: "/v1/limit", body: `{"watts":1,"volts":230}`, want: badResult{400, api.CodeBadRequest}},
		{name: "limit for another organisation", method: "PUT", path: "/v1/limit", body: `{"watts":1,"org":"beta"}`, want: badResult{400, api.CodeBadRequest}},

		// Sizes: NaN, infinite, negative, zero, fractional, overflowing.
		{name: "size zero", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":0,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size negative", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":-1,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size NaN", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":NaN,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size NaN as string", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":"NaN","wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size Infinity", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":Infinity,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size 1e999", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1e999,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size fractional", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1.5,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size over int64", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":9223372036854775808,"wall_limit_ms":1`), want: badResult{400, api.CodeBadRequest}},
		{name: "size over the ledger's bound", method: "POST", path: "/v1/tasks", body: task(fmt.Sprintf(`"size_mflop":%d,"wall_limit_ms":1`, int64(1)<<53+1)), want: badResult{400, api.CodeBadRequest}},
		{name: "wall limit zero", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1,"wall_limit_ms":0`), want: badResult{400, api.CodeBadRequest}},
		{name: "wall limit negative", method: "POST", path: "/v1/tasks", body: task(`"size_mflop":1,"wall_limit_ms":-1`), want: badResult{400, api.CodeBadRequest}},
		{name: "no command", method: "POST", path: "/v1/tasks", body: `{"tasks":[{"argv":[],"size_mflop":1,"wall_limit_ms":1}]}`, want: badResult{400, api.CodeBadRequest}},
		{name: "no tasks", method: "POST", path: "/v1/tasks", body: `{"tasks":[]}`, want: badResult{400, api.CodeBadRequest}},

		// Watts and percentages.
		{name: "watts NaN", method: "PUT", path: "/v1/limit", body: `{"watts":NaN}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts NaN as string", method: "PUT", path: "/v1/limit", body: `{"watts":"NaN"}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts Infinity", method: "PUT", path: "/v1/limit", body: `{"watts":Infinity}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts 1e999", method: "PUT", path: "/v1/limit", body: `{"watts":1e999}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts negative", method: "PUT", path: "/v1/limit", body: `{"watts":-1}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts barely negative", method: "PUT", path: "/v1/limit", body: `{"watts":-1e-300}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts over the ledger's bound", method: "PUT", path: "/v1/limit", body: `{"watts":1e13}`, want: badResult{400, api.CodeBadRequest}},
		{name: "percent negative", method: "PUT", path: "/v1/limit", body: `{"percent":-5}`, want: badResult{400, api.CodeBadRequest}},
		{name: "percent huge", method: "PUT", path: "/v1/limit", body: `{"percent":1e7}`, want: badResult{400, api.CodeBadRequest}},
		{name: "percent and watts", method: "PUT", path: "/v1/limit", body: `{"percent":50,"watts":50}`, want: badResult{400, api.CodeBadRequest}},
		{name: "neither percent nor watts", method: "PUT", path: "/v1/limit", body: `{}`, want: badResult{400, api.CodeBadRequest}},
		{name: "watts null", method: "PUT", path: "/v1/limit", body: `{"watts":null}`, want: badResult{400, api.CodeBadRequest}},

		// Unknown tasks and organisations.
		{name: "unknown task", method: "GET", path: "/v1/tasks/alpha-999", want: badResult{404, api.CodeNotFound}},
		{name: "unknown task's logs", method: "GET", path: "/v1/tasks/alpha-999/logs?stream=stdout", want: badResult{404, api.CodeNotFound}},
		{name: "cancel unknown task", method: "POST", path: "/v1/tasks/alpha-999/cancel", want: badResult{404, api.CodeNotFound}, logged: true},
		{name: "cancel unknown organisation's task", method: "POST", path: "/v1/tasks/beta-1/cancel", want: badResult{404, api.CodeNotFound}, logged: true},
		{name: "cancel malformed task ID", method: "POST", path: "/v1/tasks/a%20b/cancel", want: badResult{400, api.CodeBadRequest}},
		{name: "task ID too long", method: "GET", path: "/v1/tasks/alpha-" + strings.Repeat("9", 200), want: badResult{400, api.CodeBadRequest}},
		{name: "malformed organisation filter", method: "GET", path: "/v1/tasks?org=..%2Fbeta", want: badResult{400, api.CodeBadRequest}},
		{name: "unknown state filter", method: "GET", path: "/v1/tasks?state=lost", want: badResult{400, api.CodeBadRequest}},
		{name: "unknown query parameter", method: "PUT", path: "/v1/limit?org=beta", body: `{"watts":1}`, want: badResult{400, api.CodeBadRequest}},
	}
	before := ledgerState(t, p)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
				if tc.chunked {
					body = io.MultiReader(body) // hides the length
				}
			}
			req, err := http.NewRequestWithContext(ctx, tc.method, p.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			switch tc.auth {
			case "":
				req.Header.Set("Authorization", "Bearer "+p.Token)
			case noAuth:
			default:
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := readBadResult(t, resp); got != tc.want {
				t.Fatalf("got %d %q, want %d %q", got.status, got.code, tc.want.status, tc.want.code)
			}
			after := ledgerState(t, p)
			if after.hash != before.hash {
				t.Fatalf("state hash moved: %s → %s", before.hash, after.hash)
			}
			if !tc.logged && after.index != before.index {
				t.Fatalf("applied index moved: %d → %d", before.index, after.index)
			}
			before = after
		})
	}

	// A body declared larger than the submission limit is refused from its
	// headers, before any of it is read.
	t.Run("submit declared over the limit", func(t *testing.T) {
		head := fmt.Sprintf("POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close",
			p.Token, api.DefaultMaxSubmitBytes+1)
		if got := rawRequest(t, p.URL, head, okTask); got != (badResult{413, api.CodeTooLarge}) {
			t.Fatalf("got %+v", got)
		}
		if after := ledgerState(t, p); after != before {
			t.Fatalf("state moved: %+v → %+v", before, after)
		}
	})

	// The check has teeth: a valid limit change does move the hash.
	t.Run("a valid request changes the state", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, "PUT", p.URL+"/v1/limit", strings.NewReader(`{"watts":77}`))
		req.Header.Set("Authorization", "Bearer "+p.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if after := ledgerState(t, p); after.hash == before.hash || after.index <= before.index {
			t.Fatalf("a valid limit change left the state at %+v", after)
		}
	})
}
