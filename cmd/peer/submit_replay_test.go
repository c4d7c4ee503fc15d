package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// loseAnswers queues the submission (on the real ledger of the apitest
// backend) and then answers 503 for the first `lose` submits, as a peer
// whose proposal committed after the caller gave up would.
type loseAnswers struct {
	*apitest.Backend
	lose  *int
	sends *int
}

func (f loseAnswers) Submit(ctx context.Context, req api.SubmitRequest) (api.SubmitResponse, error) {
	*f.sends++
	resp, err := f.Backend.Submit(ctx, req)
	if err == nil && *f.lose > 0 {
		*f.lose--
		return api.SubmitResponse{}, api.Errorf(api.CodeUnavailable, "the submission may or may not have been queued")
	}
	return resp, err
}

// TestSubmitResend: `peer submit` resends a submission whose answer was
// lost with the same request ID, and a user resending a job with
// --request-id gets the original tasks back; in no case are the tasks
// queued twice.
func TestSubmitResend(t *testing.T) {
	const job = "../../examples/jobs/hello.json" // 2 tasks
	cases := []struct {
		name string
		// lose: answers lost by the backend; runs: the CLI arguments of
		// each run (after "submit --json"), all with the same job.
		lose         int
		runs         [][]string
		wantSends    int
		wantReplayed []bool
	}{
		{"answer lost once: the client's resend is a replay", 1, [][]string{{"--request-id", "hello-1"}}, 2, []bool{true}},
		{"answers lost three times: still one set of tasks", 3, [][]string{{"--request-id", "hello-1"}}, 4, []bool{true}},
		{"a user resends with --request-id", 0, [][]string{{"--request-id", "hello-1"}, {"--request-id", "hello-1"}}, 2, []bool{false, true}},
		{"without --request-id every run is a new submission", 0, [][]string{{}, {}}, 2, []bool{false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lose, sends := tc.lose, 0
			b, data := fixtureWith(t, func(b *apitest.Backend) api.Backend { return loseAnswers{b, &lose, &sends} })
			before, _ := b.Orgs(context.Background())
			var first []string
			for i, args := range tc.runs {
				code, out, errs := runCLI(t, append([]string{"submit", "--json", job, "--data", data}, args...)...)
				if code != 0 {
					t.Fatalf("run %d: exit %d: %s", i, code, errs)
				}
				var got submitOutput
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Fatal(err)
				}
				if len(got.TaskIDs) != 2 || got.Replayed != tc.wantReplayed[i] || got.RequestID == "" {
					t.Fatalf("run %d: %+v, want 2 IDs, replayed %v", i, got, tc.wantReplayed[i])
				}
				if len(args) > 0 && got.RequestID != args[1] {
					t.Fatalf("run %d: request ID %q, want %q", i, got.RequestID, args[1])
				}
				if i == 0 {
					first = got.TaskIDs
				} else if same := slices.Equal(got.TaskIDs, first); same != tc.wantReplayed[i] {
					t.Fatalf("run %d: IDs %v after %v", i, got.TaskIDs, first)
				}
			}
			if sends != tc.wantSends {
				t.Fatalf("%d submissions reached the peer, want %d", sends, tc.wantSends)
			}
			after, _ := b.Orgs(context.Background())
			wantNew := 2
			if len(tc.runs) == 2 && !tc.wantReplayed[1] {
				wantNew = 4
			}
			if got := after[0].Queued - before[0].Queued; got != wantNew {
				t.Fatalf("%d tasks queued, want %d", got, wantNew)
			}
		})
	}
	t.Run("text output of a replay", func(t *testing.T) {
		_, data := fixture(t)
		for i := 0; i < 2; i++ {
			code, out, errs := runCLI(t, "submit", job, "--data", data, "--request-id", "again")
			want := "submitted job hello: 2 tasks"
			if i == 1 {
				want = "already submitted (request ID again): job hello: 2 tasks, nothing queued again"
			}
			if code != 0 || lines(out)[0] != want {
				t.Fatalf("run %d: exit %d, %q %s; want %q", i, code, out, errs, want)
			}
		}
	})
	t.Run("bad request IDs", func(t *testing.T) {
		_, data := fixture(t)
		for _, id := range []string{"has space", strings.Repeat("k", 129), "slash/no"} {
			code, _, errs := runCLI(t, "submit", job, "--data", data, "--request-id", id)
			if code != 2 || !strings.Contains(errs, "--request-id") {
				t.Fatalf("%q: exit %d: %s", id, code, errs)
			}
		}
	})
}
