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
	// state is the rule in force (inForce false: none) and the pending votes.
	type state struct {
		rule    Retention
		inForce bool
		votes   int
	}
	now := func() state {
		s := state{votes: len(f.l.RetentionVotes())}
		if r := rule(); r != nil {
			s.rule, s.inForce = *r, true
		}
		return s
	}
	none := func(votes int) state { return state{votes: votes} }
	applyVoteSteps(t, f, now, []voteStep[state]{
		{"first vote is recorded", retentionVote("uni-a", 5000, 0), "", none(1)},
		{"the same vote again", retentionVote("uni-a", 5000, 0), CodeExists, none(1)},
		{"a vote for the rule in force (none)", retentionVote("uni-b", 0, 0), CodeBadState, none(1)},
		{"a figure out of range", retentionVote("uni-b", -1, 0), CodeMalformed, none(1)},
		{"a peer acting for another organisation", sentBy(retentionVote("uni-b", 5000, 0), "uni-a"), CodeNotOwner, none(1)},
		{"an unregistered organisation", retentionVote("uni-z", 5000, 0), CodeUnknownOrg, none(1)},
		{"a vote for another rule: no majority", retentionVote("uni-b", 0, 3), "", none(2)},
		{"changing one's vote makes the majority", retentionVote("uni-b", 5000, 0), "", state{rule: Retention{AfterMs: 5000}, inForce: true}},
	})
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
