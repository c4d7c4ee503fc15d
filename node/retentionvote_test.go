package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/config"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestRetentionVoteWithRealPeers: a federation registered with no
// retention rule keeps its finished tasks; r-a's vote for a 1 s rule is
// recorded but changes nothing alone; r-b's makes the majority and the
// rule is in force on every peer, which then forgets a finished task into
// r-a's history. Over the API, a vote without the token or with bad
// figures is refused and changes nothing.
func TestRetentionVoteWithRealPeers(t *testing.T) {
	noRule := func(c *config.Config) { c.Consensus.RetentionAfter, c.Consensus.RetentionKeep = 0, 0 }
	peers := federation(t, "sim", []string{"v-a", "v-b"}, map[string]string{"v-a": simMachine("a1", 10, 100)},
		map[string]func(*config.Config){"v-a": noRule})
	a, b := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if v, err := a.n.Retention(ctx); err != nil || v.AfterMs != 0 || v.Keep != 0 {
		t.Fatalf("the federation's rule at the start: %+v, %v", v, err)
	}

	srv := httptest.NewServer(api.NewServer(a.n, api.ServerOptions{Token: "tok"}))
	defer srv.Close()
	var ae *api.Error
	if _, err := api.NewClient(srv.URL, "wrong", nil).VoteRetention(ctx, api.RetentionRequest{AfterMs: 1000}); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("a vote with a wrong token: %v", err)
	}
	cl := api.NewClient(srv.URL, "tok", nil)
	if _, err := cl.VoteRetention(ctx, api.RetentionRequest{AfterMs: -1}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
		t.Fatalf("a vote with a negative figure: %v", err)
	}
	v, err := cl.VoteRetention(ctx, api.RetentionRequest{AfterMs: 1000})
	if err != nil || v.AfterMs != 0 || len(v.Votes) != 1 || v.Votes[0].Org != "v-a" || v.Note == "" {
		t.Fatalf("r-a's vote: %+v, %v", v, err)
	}
	if _, err := cl.VoteRetention(ctx, api.RetentionRequest{AfterMs: 1000}); !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Fatalf("the same vote again: %v", err)
	}
	if v, err = b.n.VoteRetention(ctx, api.RetentionRequest{AfterMs: 1000}); err != nil || v.AfterMs != 1000 || len(v.Votes) != 0 {
		t.Fatalf("r-b's vote: %+v, %v", v, err)
	}
	waitFor(t, 20*time.Second, "the rule on r-a", func() bool {
		v, _ := a.n.Retention(ctx)
		return v.AfterMs == 1000
	})

	resp, err := a.n.Submit(ctx, api.SubmitRequest{Job: "j", Tasks: []api.SubmitTask{{Argv: []string{"true"}, SizeMFlop: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.TaskIDs[0]
	waitFor(t, 30*time.Second, id+" forgotten into r-a's history", func() bool {
		var held bool
		a.n.cons.View(func(l *ledger.Ledger) { _, held = l.Task(id) })
		p, err := a.n.History(ctx, api.HistoryQuery{Limit: 10})
		return !held && err == nil && len(p.Records) == 1 && p.Records[0].ID == id
	})
}
