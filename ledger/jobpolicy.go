package ledger

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/coopgrid/coopgrid/policy"
)

// The job policy (issue 21) is a federation setting: how the queue of
// parallel jobs is served (policy/backfill.go; docs/POLICY.md §8). It is
// replicated like every input of the scheduler, and it changes only by a
// federation decision: an organisation votes for a policy with a
// job_policy command, and when the votes of a strict majority of the
// organisations that are not removed name the same policy, it is in force
// from that entry on (the rule of a member's removal, membership.go).
// No organisation, the leader's included, changes it alone in a federation
// of more than one, and a removed organisation's vote is refused and no
// longer counts.

// KindJobPolicy is an organisation's vote for the federation's job policy.
const KindJobPolicy Kind = "job_policy"

// DefaultJobPolicy is the job policy of a federation that never voted
// another: EHOSEP's task order with no reservations, what every federation
// did before job policies existed.
const DefaultJobPolicy = "ehosep"

// jobPolicyNames are the policies a vote may name. The list is part of
// the log's meaning (a vote naming another is malformed on every peer), so
// a name is only ever added with a new command version: jobPolicySince
// gives each later name's, and a vote naming it is a command of that
// version (JobPolicyVote.valueVersion), which a peer of an older build
// never applies (it stops at it: NewerVersion) and the leader commits only
// once every member applies it (leader/admit.go).
var jobPolicyNames = []string{DefaultJobPolicy, "fcfs", "easy", "conservative", policy.EHOSEPEasy}

// jobPolicySince is the command version that added a name to
// jobPolicyNames, for those added after the vote itself (version 2).
var jobPolicySince = map[string]int{policy.EHOSEPEasy: 3}

// jobPolicyNamesV2 is the message's list of the names of version 2, as it
// was when the vote was introduced (golden rejections pin it).
const jobPolicyNamesV2 = "ehosep, fcfs, easy, conservative"

// JobPolicyNames lists the job policies a vote may name, the default first.
func JobPolicyNames() []string { return slices.Clone(jobPolicyNames) }

// valueVersion: a vote for a name added after version 2 is a command of
// the name's version.
func (b *JobPolicyVote) valueVersion() (int, string) {
	if n, ok := jobPolicySince[b.Policy]; ok {
		return n, ".policy"
	}
	return CommandVersion, ""
}

// JobPolicyVote is the acting organisation's vote for Policy. An
// organisation has at most one pending vote: a new one replaces it.
//
// Apply refuses, changing nothing:
//   - a policy not in JobPolicyNames (CodeMalformed);
//   - a peer that does not act for the organisation, or a removed
//     organisation (CodeNotOwner), an unregistered one (CodeUnknownOrg);
//   - a vote for the policy in force (CodeBadState), or the same vote as
//     the organisation's pending one (CodeExists).
//
// Otherwise the vote is recorded (a note says how many more are needed),
// or, when it makes a strict majority for its policy, the policy is in
// force and every pending vote is cleared.
type JobPolicyVote struct {
	Policy string `json:"policy,omitempty" since:"2"`
}

func (*JobPolicyVote) Kind() Kind { return KindJobPolicy }

func (b *JobPolicyVote) validate() *Error {
	if !slices.Contains(jobPolicyNames, b.Policy) {
		// The message lists the names of version 2, as it always did
		// (pinned by the golden rejections); docs/POLICY.md lists all.
		return errf(CodeMalformed, "job policy %q: want one of %s", b.Policy, jobPolicyNamesV2)
	}
	return nil
}

// JobPolicySetting is the job policy in force and the decision that put
// it there (Index 0 and no voters: the default, never voted).
type JobPolicySetting struct {
	Policy string   `json:"policy"`
	Index  uint64   `json:"index,omitempty"`
	AtMs   int64    `json:"at_ms,omitempty"`
	Voters []string `json:"voters,omitempty"`
}

// JobPolicyVoteRecord is a pending vote of Voter for Policy.
type JobPolicyVoteRecord struct {
	Voter  string `json:"voter"`
	Policy string `json:"policy"`
	Index  uint64 `json:"index"`
}

// jobPolicyState is the part of the replicated state job_policy commands
// build: the decision in force (nil: the default) and the pending votes in
// log order.
type jobPolicyState struct {
	setting *JobPolicySetting
	votes   []*JobPolicyVoteRecord
}

func (b *JobPolicyVote) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	if cur := l.JobPolicy(); cur.Policy == b.Policy {
		return nil, errf(CodeBadState, "job policy %s is already in force", b.Policy)
	}
	var voters []string
	for _, v := range l.jobPol.votes {
		if v.Voter == c.Org {
			if v.Policy == b.Policy {
				return nil, errf(CodeExists, "%q already voted for job policy %s (entry %d)", c.Org, b.Policy, v.Index)
			}
			continue // replaced by this vote
		}
		if v.Policy == b.Policy && l.removedOrg(v.Voter) == nil {
			voters = append(voters, v.Voter)
		}
	}
	voters = append(voters, c.Org)
	active := l.activeOrgs()
	if 2*len(voters) <= active {
		return func(index uint64, res *Result) {
			l.jobPol.votes = slices.DeleteFunc(l.jobPol.votes, func(v *JobPolicyVoteRecord) bool { return v.Voter == c.Org })
			l.jobPol.votes = append(l.jobPol.votes, &JobPolicyVoteRecord{Voter: c.Org, Policy: b.Policy, Index: index})
			res.Notes = append(res.Notes, "vote recorded: "+strconv.Itoa(len(voters))+" of "+strconv.Itoa(active)+
				" organisations want job policy "+b.Policy+"; more than half must")
		}, nil
	}
	slices.Sort(voters)
	return func(index uint64, res *Result) {
		l.jobPol = jobPolicyState{setting: &JobPolicySetting{Policy: b.Policy, Index: index, AtMs: c.AtMs, Voters: voters}}
		res.Notes = append(res.Notes, "job policy "+b.Policy+" in force, voted by "+strings.Join(voters, ", "))
	}, nil
}

// activeOrgs counts the registered organisations not removed.
func (l *Ledger) activeOrgs() int {
	n := 0
	for _, name := range l.order {
		if l.removedOrg(name) == nil {
			n++
		}
	}
	return n
}

// JobPolicy is the federation's job policy in force (DefaultJobPolicy with
// Index 0 when none was ever voted).
func (l *Ledger) JobPolicy() JobPolicySetting {
	s := l.jobPol.setting
	if s == nil {
		return JobPolicySetting{Policy: DefaultJobPolicy}
	}
	out := *s
	out.Voters = slices.Clone(s.Voters)
	return out
}

// JobPolicyVotes lists the pending job policy votes, in log order,
// removed organisations' included (they no longer count).
func (l *Ledger) JobPolicyVotes() []JobPolicyVoteRecord {
	out := make([]JobPolicyVoteRecord, len(l.jobPol.votes))
	for i, v := range l.jobPol.votes {
		out[i] = *v
	}
	return out
}

// canonicalJobPolicy is the job policy state for Hash and snapshots; nil
// when there is none, so that a state without it encodes as before.
func (l *Ledger) canonicalJobPolicy() *canonicalJobPol {
	if l.jobPol.setting == nil && len(l.jobPol.votes) == 0 {
		return nil
	}
	return &canonicalJobPol{Setting: l.jobPol.setting, Votes: l.jobPol.votes}
}

type canonicalJobPol struct {
	Setting *JobPolicySetting      `json:"setting,omitempty"`
	Votes   []*JobPolicyVoteRecord `json:"votes,omitempty"`
}

// restoreJobPolicy takes a snapshot's job policy state; CheckInvariants
// checks the rest.
func (l *Ledger) restoreJobPolicy(c *canonicalJobPol) error {
	if c == nil {
		return nil
	}
	if slices.Contains(c.Votes, nil) {
		return fmt.Errorf("a null job policy vote")
	}
	l.jobPol = jobPolicyState{setting: c.Setting, votes: c.Votes}
	return nil
}

// jobPolicyInvariants: the policy in force and every vote name a known
// policy and registered organisations; no vote is for the policy in force;
// an organisation has at most one vote; votes are in log order.
func (l *Ledger) jobPolicyInvariants(fail func(string, ...any)) {
	cur := l.JobPolicy()
	if !slices.Contains(jobPolicyNames, cur.Policy) {
		fail("job policy %q in force is not a known policy", cur.Policy)
	}
	if s := l.jobPol.setting; s != nil {
		if s.Index == 0 || len(s.Voters) == 0 {
			fail("job policy %s in force without the decision (entry %d, %d voters)", s.Policy, s.Index, len(s.Voters))
		}
		for _, v := range s.Voters {
			if l.orgs[v] == nil {
				fail("job policy %s voted by unregistered organisation %q", s.Policy, v)
			}
		}
	}
	seen := map[string]bool{}
	var last uint64
	for _, v := range l.jobPol.votes {
		switch {
		case l.orgs[v.Voter] == nil:
			fail("job policy vote of unregistered organisation %q", v.Voter)
		case seen[v.Voter]:
			fail("organisation %q has two pending job policy votes", v.Voter)
		case !slices.Contains(jobPolicyNames, v.Policy) || v.Policy == cur.Policy:
			fail("pending job policy vote of %q for %q: unknown or already in force", v.Voter, v.Policy)
		case v.Index <= last || (l.jobPol.setting != nil && v.Index <= l.jobPol.setting.Index):
			fail("job policy vote of %q at entry %d out of log order", v.Voter, v.Index)
		}
		seen[v.Voter] = true
		last = v.Index
	}
}
