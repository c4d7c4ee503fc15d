package ledger

import "testing"

// voteStep is one step of a table-driven vote test (retention_vote,
// job_policy): a vote, the refusal it must meet and the state it leaves.
type voteStep[S comparable] struct {
	name string
	c    Command
	want Code // "" = applied
	then S    // the state after the step, as the test's state function reads it
}

// applyVoteSteps applies the steps to f in turn: a step to be applied
// must be; one to be refused must be refused with its code and leave the
// state as it was (its hash); after every step, state() must be its then.
func applyVoteSteps[S comparable](t *testing.T, f *fed, state func() S, steps []voteStep[S]) {
	t.Helper()
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
		if got := state(); got != s.then {
			t.Fatalf("%s: state %+v, want %+v", s.name, got, s.then)
		}
	}
}

// sentBy is c sent by org's peer instead of its own organisation's.
func sentBy(c Command, org string) Command {
	c.Peer = peerOf(org)
	return c
}
