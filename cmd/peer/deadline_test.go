package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/api/apitest"
)

// troubled answers like a peer in trouble: every submission after a pause
// with 503 unavailable (so the client resends it), every limit change with
// no_quorum, and a status only once the request ends.
type troubled struct {
	*apitest.Backend
	pause time.Duration
	sends *atomic.Int32
}

func (b troubled) Submit(ctx context.Context, _ api.SubmitRequest) (api.SubmitResponse, error) {
	b.sends.Add(1)
	select {
	case <-time.After(b.pause):
	case <-ctx.Done():
	}
	return api.SubmitResponse{}, api.Errorf(api.CodeUnavailable, "the submission may or may not have been queued")
}

func (b troubled) SetLimit(context.Context, api.LimitRequest) (api.OrgView, error) {
	return api.OrgView{}, api.Errorf(api.CodeNoQuorum, "no leader for 5s: this peer reaches 1 of the 3 voters and a leader needs 2")
}

func (b troubled) Status(ctx context.Context) (api.Status, error) {
	<-ctx.Done()
	return api.Status{}, ctx.Err()
}

// TestWholeTimeout: --timeout bounds a command as a whole, resends and
// pauses included, not each request; a no_quorum answer is said as such
// and not resent.
func TestWholeTimeout(t *testing.T) {
	const job = "../../examples/jobs/hello.json"
	var sends atomic.Int32
	// Each answer comes well within --timeout, but the client's four
	// attempts and their pauses (250 ms, 500 ms, 1 s) do not.
	_, data := fixtureWith(t, func(b *apitest.Backend) api.Backend {
		return troubled{Backend: b, pause: 300 * time.Millisecond, sends: &sends}
	})
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"resends cut short", []string{"submit", job, "--request-id", "job-7", "--timeout", "1s"}, 1,
			[]string{"gave up after --timeout 1s", "request ID job-7"}},
		{"a request that never ends", []string{"status", "--timeout", "200ms"}, 1,
			[]string{"gave up after --timeout 200ms", "context deadline exceeded"}},
		{"no quorum", []string{"limit", "set", "50%"}, 1,
			[]string{"no quorum: no leader for 5s: this peer reaches 1 of the 3 voters"}},
		{"bad duration", []string{"status", "--timeout", "soon"}, 2, []string{"--timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sends.Store(0)
			code, out, errs := runCLI(t, append(tc.args, "--data", data)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errs)
			}
			for _, w := range tc.wants {
				if !strings.Contains(errs, w) {
					t.Fatalf("stderr %q lacks %q", errs, w)
				}
			}
			if tc.name == "resends cut short" {
				if n := sends.Load(); n < 1 || n >= api.DefaultSubmitAttempts {
					t.Fatalf("%d submissions reached the peer: want the resends cut short (fewer than %d)", n, api.DefaultSubmitAttempts)
				}
			}
		})
	}
	t.Run("--timeout 0 and the default", func(t *testing.T) {
		_, out, _ := runCLI(t, "status", "--help")
		if !strings.Contains(out, "--timeout duration") || !strings.Contains(out, "(default 1m0s)") {
			t.Fatalf("help:\n%s", out)
		}
	})
}

// quorumless answers every submission no_quorum.
type quorumless struct {
	*apitest.Backend
	sends *atomic.Int32
}

func (b quorumless) Submit(context.Context, api.SubmitRequest) (api.SubmitResponse, error) {
	b.sends.Add(1)
	return api.SubmitResponse{}, api.Errorf(api.CodeNoQuorum, "no leader for 5s; resend with request ID job-8 then")
}

// TestSubmitNoQuorumNotResent: a submission answered no_quorum is an answer:
// the client does not resend it, and says why.
func TestSubmitNoQuorumNotResent(t *testing.T) {
	var sends atomic.Int32
	_, data := fixtureWith(t, func(b *apitest.Backend) api.Backend { return quorumless{b, &sends} })
	code, _, errs := runCLI(t, "submit", "../../examples/jobs/hello.json", "--request-id", "job-8", "--data", data)
	if code != 1 || !strings.Contains(errs, "(request ID job-8): no quorum: no leader for 5s") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if n := sends.Load(); n != 1 {
		t.Fatalf("%d submissions reached the peer, want 1", n)
	}
}
