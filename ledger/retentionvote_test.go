package ledger

import (
	"bytes"
	"testing"
)

func retentionVote(org string, afterMs, keep int64) Command {
	c := act(org, 40_000)
	c.V = 3 // retention_vote is a version-3 kind
	c.RetentionVote = &RetentionVote{AfterMs: afterMs, Keep: keep}
	return c
}

// TestRetentionVotes: a federation registered without a retention rule
// gets one only when a strict majority of its organisations vote for the
// same rule; a refused vote changes nothing; the rule in force lets
// forget_tasks go, survives a snapshot, and a later majority for no rule
// takes it away again.
func TestRetentionVotes(t *testing.T) {
	f := retained(t, nil)
	rule := func() *Retention { r, _ := f.l.Rules(); return r.Retention }
	steps := []struct {
		name  string
		c     Command
		want  Code // "" = applied
		rule  *Retention
		votes int
	}{
		{"first vote is recorded", retentionVote("uni-a", 5000, 0), "", nil, 1},
		{"the same vote again", retentionVote("uni-a", 5000, 0), CodeExists, nil, 1},
		{"a vote for the rule in force (none)", retentionVote("uni-b", 0, 0), CodeBadState, nil, 1},
		{"a figure out of range", retentionVote("uni-b", -1, 0), CodeMalformed, nil, 1},
		{"a peer acting for another organisation", func() Command { c := retentionVote("uni-b", 5000, 0); c.Peer = peerOf("uni-a"); return c }(), CodeNotOwner, nil, 1},
		{"an unregistered organisation", retentionVote("uni-z", 5000, 0), CodeUnknownOrg, nil, 1},
		{"a vote for another rule: no majority", retentionVote("uni-b", 0, 3), "", nil, 2},
		{"changing one's vote makes the majority", retentionVote("uni-b", 5000, 0), "", &Retention{AfterMs: 5000}, 0},
	}
	for _, s := range steps {
		before := f.l.Hash()
		r := f.apply(s.c)
		switch {
		case s.want == "" && !r.Applied():
			t.Fatalf("%s: refused: %v", s.name, r.Err)
		case s.want != "" && (r.Err == nil || r.Err.Code != s.want):
			t.Fatalf("%s: got %v, want %s", s.name, r.Err, s.want)
		case s.want != "" && f.l.Hash() != before:
			t.Fatalf("%s: a refused vote changed the state", s.name)
		}
		got := rule()
		if (got == nil) != (s.rule == nil) || (got != nil && *got != *s.rule) || len(f.l.RetentionVotes()) != s.votes {
			t.Fatalf("%s: rule %+v, votes %+v; want %+v and %d votes", s.name, got, f.l.RetentionVotes(), s.rule, s.votes)
		}
	}
	// The voted rule lets a task ended at 30 s go at 40 s.
	if r := f.apply(forget(40_000, "uni-a-1")); !r.Applied() {
		t.Fatalf("forget under the voted rule: %v", r.Err)
	}
	// A snapshot carries the rule and a pending vote.
	f.must(retentionVote("uni-a", 0, 0))
	nl := New()
	if err := nl.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
		t.Fatal(err)
	}
	if nl.Hash() != f.l.Hash() || len(nl.RetentionVotes()) != 1 {
		t.Fatalf("restored votes %+v, hash differs: %v", nl.RetentionVotes(), nl.Hash() != f.l.Hash())
	}
	// A majority for no rule: every task is kept again.
	f.must(retentionVote("uni-b", 0, 0))
	if got := rule(); got != nil {
		t.Fatalf("rule %+v after a majority for none", got)
	}
	if r := f.apply(forget(90_000, "uni-a-2")); r.Err == nil || r.Err.Code != CodeRetention {
		t.Fatalf("forget without a rule: %v", r.Err)
	}
	if err := f.l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
