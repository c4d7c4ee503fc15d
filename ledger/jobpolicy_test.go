package ledger

import (
	"bytes"
	"slices"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

func policyVote(org, policy string) Command {
	c := act(org, 6000)
	c.JobPolicy = &JobPolicyVote{Policy: policy}
	return c
}

// TestJobPolicyVotes: the job policy changes only when a strict majority
// of the organisations not removed vote for the same policy; an
// organisation's new vote replaces its old one; whoever may not vote (a
// peer acting for another organisation, an unregistered or removed
// organisation) is refused and changes nothing; the state survives a
// snapshot and a replay of the log.
func TestJobPolicyVotes(t *testing.T) {
	f := base(t)
	f.must(register("uni-c", 100_000, mspec("c1", 1000, 50_000)))
	if p := f.l.JobPolicy(); p.Policy != DefaultJobPolicy || p.Index != 0 {
		t.Fatalf("a new federation's job policy: %+v", p)
	}
	// state is the policy in force and the pending votes.
	type state struct {
		policy string
		votes  int
	}
	now := func() state { return state{f.l.JobPolicy().Policy, len(f.l.JobPolicyVotes())} }
	applyVoteSteps(t, f, now, []voteStep[state]{
		{"first vote is recorded", policyVote("uni-a", "easy"), "", state{"ehosep", 1}},
		{"the same vote again", policyVote("uni-a", "easy"), CodeExists, state{"ehosep", 1}},
		{"a vote for the policy in force", policyVote("uni-b", "ehosep"), CodeBadState, state{"ehosep", 1}},
		{"a peer acting for another organisation", sentBy(policyVote("uni-b", "easy"), "uni-a"), CodeNotOwner, state{"ehosep", 1}},
		{"an unregistered organisation", policyVote("uni-z", "easy"), CodeUnknownOrg, state{"ehosep", 1}},
		{"an unknown policy", policyVote("uni-b", "sjf"), CodeMalformed, state{"ehosep", 1}},
		{"a vote for another policy: no majority", policyVote("uni-b", "conservative"), "", state{"ehosep", 2}},
		{"changing one's vote makes the majority", policyVote("uni-b", "easy"), "", state{"easy", 0}},
	})
	p := f.l.JobPolicy()
	if !slices.Equal(p.Voters, []string{"uni-a", "uni-b"}) || p.Index != f.idx || p.AtMs != 6000 {
		t.Fatalf("decision recorded as %+v (last index %d)", p, f.idx)
	}

	// A snapshot and a replay of the log give the same state.
	nl := New()
	if err := nl.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
		t.Fatal(err)
	}
	if nl.Hash() != f.l.Hash() || nl.JobPolicy().Policy != "easy" {
		t.Fatalf("restored %+v, hash differs: %v", nl.JobPolicy(), nl.Hash() != f.l.Hash())
	}
	re := New()
	for i, e := range f.log {
		re.Apply(uint64(i+1), e)
	}
	if re.Hash() != f.l.Hash() {
		t.Fatal("replaying the log gives another state")
	}

	// A removed organisation may no longer vote, and no longer counts:
	// of two organisations left, both must agree.
	f.must(vote("uni-a", "uni-c"))
	f.must(vote("uni-b", "uni-c"))
	if r := f.apply(policyVote("uni-c", "fcfs")); r.Err == nil || r.Err.Code != CodeNotOwner {
		t.Fatalf("a removed organisation's vote: %v", r.Err)
	}
	f.must(policyVote("uni-a", "fcfs"))
	if p := f.l.JobPolicy(); p.Policy != "easy" {
		t.Fatalf("one vote of two changed the policy to %s", p.Policy)
	}
	f.must(policyVote("uni-b", "fcfs"))
	if p := f.l.JobPolicy(); p.Policy != "fcfs" {
		t.Fatalf("two votes of two left the policy at %s", p.Policy)
	}
}

// TestJobPolicyAlone: the only organisation of a federation is its
// majority: its vote is in force at once.
func TestJobPolicyAlone(t *testing.T) {
	f := newFed(t)
	f.must(register("uni-a", 300_000, mspec("m1", 1000, 100_000)))
	r := f.must(policyVote("uni-a", "conservative"))
	if p := f.l.JobPolicy(); p.Policy != "conservative" || len(r.Notes) != 1 {
		t.Fatalf("policy %+v, notes %q", p, r.Notes)
	}
}

// TestJobPolicyInvariants: a snapshot whose job policy state breaks the
// rules is refused by the invariants after restore.
func TestJobPolicyInvariants(t *testing.T) {
	cases := []struct {
		name string
		st   jobPolicyState
	}{
		{"unknown policy in force", jobPolicyState{setting: &JobPolicySetting{Policy: "sjf", Index: 3, Voters: []string{"uni-a"}}}},
		{"in force without a decision", jobPolicyState{setting: &JobPolicySetting{Policy: "easy"}}},
		{"vote of an unknown organisation", jobPolicyState{votes: []*JobPolicyVoteRecord{{Voter: "uni-z", Policy: "easy", Index: 2}}}},
		{"vote for the policy in force", jobPolicyState{votes: []*JobPolicyVoteRecord{{Voter: "uni-a", Policy: "ehosep", Index: 2}}}},
		{"two votes of one organisation", jobPolicyState{votes: []*JobPolicyVoteRecord{{Voter: "uni-a", Policy: "easy", Index: 2}, {Voter: "uni-a", Policy: "fcfs", Index: 3}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := base(t)
			f.l.jobPol = tc.st
			if err := f.l.CheckInvariants(); err == nil {
				t.Fatal("invariants hold")
			}
		})
	}
}

// TestJobPolicyEHOSEPEasy: ehosep-easy (issue 21) is a name of command
// version 3: a vote for it encodes as version 3 and is voted in like the
// others; the same vote in a version-2 command is refused as a command
// of the wrong version (an older peer would take it for malformed) and
// changes nothing, at decode and at apply; names close to it are
// malformed. Once in force, the pass runs it.
func TestJobPolicyEHOSEPEasy(t *testing.T) {
	f := newFed(t)
	f.must(registerRules("uni-a", 300_000, schedRules("ehosep", 0), mspec("m1", 1000, 100_000)))
	c := policyVote("uni-a", policy.EHOSEPEasy)
	c.V = 0
	data, err := EncodeCommand(c)
	if err != nil || !bytes.Contains(data, []byte(`"v":3`)) {
		t.Fatalf("the vote encodes as %s, %v; want version 3", data, err)
	}
	for _, bad := range []struct {
		name string
		data string
		code Code
		msg  string
	}{
		{"a version-2 vote for it", `{"v":2,"org":"uni-a","peer":"` + peerOf("uni-a") + `","at_ms":6000,"job_policy":{"policy":"ehosep-easy"}}`,
			CodeBadVersion, "command version 2 carries job_policy.policy, of version 3"},
		{"an underscore", `{"v":3,"org":"uni-a","peer":"` + peerOf("uni-a") + `","at_ms":6000,"job_policy":{"policy":"ehosep_easy"}}`,
			CodeMalformed, `job policy "ehosep_easy": want one of ehosep, fcfs, easy, conservative`},
		{"upper case", `{"v":3,"org":"uni-a","peer":"` + peerOf("uni-a") + `","at_ms":6000,"job_policy":{"policy":"EHOSEP-EASY"}}`,
			CodeMalformed, `job policy "EHOSEP-EASY": want one of ehosep, fcfs, easy, conservative`},
	} {
		if _, err := DecodeCommand([]byte(bad.data)); err == nil || err.(*Error).Code != bad.code || err.(*Error).Msg != bad.msg {
			t.Errorf("%s: decode gave %v, want %s: %s", bad.name, err, bad.code, bad.msg)
		}
		before := f.l.Hash()
		if r := f.raw([]byte(bad.data)); r.Err == nil || r.Err.Code != bad.code || f.l.Hash() != before {
			t.Errorf("%s: apply gave %v (state changed: %v)", bad.name, r.Err, f.l.Hash() != before)
		}
	}
	if p := f.l.JobPolicy(); p.Policy != DefaultJobPolicy {
		t.Fatalf("a refused vote changed the policy: %+v", p)
	}
	f.raw(data)
	if p := f.l.JobPolicy(); p.Policy != policy.EHOSEPEasy {
		t.Fatalf("policy %+v after the vote", p)
	}
	if p, perr := f.l.SchedulingPass(7000); perr != nil || p.policy.Name() != policy.EHOSEPEasy {
		t.Fatalf("the pass: %v, %v; want ehosep-easy's", p, perr)
	}
}
