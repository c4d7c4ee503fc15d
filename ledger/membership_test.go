package ledger

import (
	"bytes"
	"testing"
)

func admit(leader, inv, inviter, org, peer string, expires, at int64) Command {
	c := act(leader, at)
	c.Membership = &Membership{Admit: &Admission{Invitation: inv, InviterOrg: inviter, InviterPeer: peerOf(inviter),
		Org: org, Peer: peer, ExpiresMs: expires, Token: "cginv1.x"}}
	return c
}

func vote(voter, target string) Command {
	c := act(voter, 5000)
	c.Membership = &Membership{Remove: &RemovalVote{Org: target}}
	return c
}

// TestAdmissionRules: an invitation is spent once, by the peer and
// organisation it admitted; expired, foreign and conflicting admissions are
// refused and change nothing; a refused admission leaves the hash as it was;
// registration follows the admission's binding.
func TestAdmissionRules(t *testing.T) {
	f := base(t)
	f.must(admit("uni-a", "inv1", "uni-b", "uni-c", peerOf("uni-c"), 9000, 4000))
	cases := []struct {
		name string
		c    Command
		want Code
	}{
		{"spent by another peer", admit("uni-a", "inv1", "uni-b", "uni-c", peerOf("uni-d"), 9000, 4000), CodeExists},
		{"spent for another organisation", admit("uni-a", "inv1", "uni-b", "uni-d", peerOf("uni-c"), 9000, 4000), CodeExists},
		{"expired", admit("uni-a", "inv2", "uni-b", "uni-d", peerOf("uni-d"), 3999, 4000), CodeBadState},
		{"inviter not registered", admit("uni-a", "inv3", "uni-z", "uni-d", peerOf("uni-d"), 9000, 4000), CodeUnknownOrg},
		{"organisation admitted for another peer", admit("uni-a", "inv4", "uni-b", "uni-c", peerOf("uni-d"), 9000, 4000), CodeExists},
		{"organisation registered to another peer", admit("uni-a", "inv5", "uni-b", "uni-a", peerOf("uni-d"), 9000, 4000), CodeExists},
		{"peer bound to another organisation", admit("uni-a", "inv6", "uni-b", "uni-d", peerOf("uni-c"), 9000, 4000), CodeExists},
		{"register by another peer than admitted", func() Command { c := register("uni-c", 1000); c.Peer = peerOf("uni-d"); return c }(), CodeExists},
		{"admitted peer registers another organisation", func() Command { c := register("uni-e", 1000); c.Peer = peerOf("uni-c"); return c }(), CodeNotOwner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.l.Hash()
			r := f.apply(tc.c)
			if r.Err == nil || r.Err.Code != tc.want {
				t.Fatalf("got %v, want %s", r.Err, tc.want)
			}
			if f.l.Hash() != before {
				t.Fatal("a refused command changed the state")
			}
		})
	}
	// The same admission again (a leader's retry) changes nothing.
	before := f.l.Hash()
	if r := f.must(admit("uni-a", "inv1", "uni-b", "uni-c", peerOf("uni-c"), 9000, 4500)); len(r.Notes) == 0 || f.l.Hash() != before {
		t.Fatalf("repeated admission: %+v", r)
	}
	f.must(register("uni-c", 1000, mspec("c1", 1000, 1000)))
	// Survives a snapshot.
	g := New()
	if err := g.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil || g.Hash() != f.l.Hash() || len(g.Admissions()) != 1 {
		t.Fatalf("restore: %v, %d admissions", err, len(g.Admissions()))
	}
}

// TestRemovalVotes: more than half of the organisations not removed must
// vote; a removed organisation can no longer act, register or invite.
func TestRemovalVotes(t *testing.T) {
	f := base(t)
	f.must(register("uni-c", 1000, mspec("c1", 1000, 1000)))
	if r := f.apply(vote("uni-c", "uni-c")); r.Err == nil || r.Err.Code != CodeBadState {
		t.Fatalf("voting on oneself: %v", r.Err)
	}
	if r := f.must(vote("uni-a", "uni-c")); f.l.IsRemoved("uni-c") {
		t.Fatalf("one vote of three removed: %+v", r)
	}
	if r := f.apply(vote("uni-a", "uni-c")); r.Err == nil || r.Err.Code != CodeExists {
		t.Fatalf("voting twice: %v", r.Err)
	}
	f.must(vote("uni-b", "uni-c"))
	if !f.l.IsRemoved("uni-c") || len(f.l.RemovalVotes()) != 0 {
		t.Fatalf("two of three: removed %v, votes %v", f.l.IsRemoved("uni-c"), f.l.RemovalVotes())
	}
	for _, c := range []Command{submit("uni-c", 6000, 1000), vote("uni-c", "uni-a"),
		admit("uni-a", "inv9", "uni-c", "uni-d", peerOf("uni-d"), 9000, 4000),
		admit("uni-a", "inv9", "uni-b", "uni-c", peerOf("uni-c"), 9000, 4000)} {
		if r := f.apply(c); r.Err == nil || r.Err.Code != CodeNotOwner {
			t.Fatalf("%s after removal: %v", r.Kind, r.Err)
		}
	}
	g := New()
	if err := g.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil || !g.IsRemoved("uni-c") || g.Hash() != f.l.Hash() {
		t.Fatalf("restore: %v", err)
	}
}
