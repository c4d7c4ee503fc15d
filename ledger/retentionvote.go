package ledger

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The retention rule (retention.go) is fixed by the federation's first
// registration; a federation changes it later by a vote, as it changes its
// job policy (jobpolicy.go): an organisation votes for a rule with a
// retention_vote command, and when the votes of a strict majority of the
// organisations that are not removed name the same rule, it is the
// federation's rule (Rules.Retention) from that entry on, and every
// pending retention vote is cleared. No organisation, the leader's
// included, changes it alone in a federation of more than one. A vote for
// no rule (both figures 0) asks that every task be kept.

// KindRetentionVote is an organisation's vote for the federation's
// retention rule.
const KindRetentionVote Kind = "retention_vote"

// RetentionVote is the acting organisation's vote for the retention rule
// AfterMs / Keep (as in Retention; both 0: no rule, every task kept). An
// organisation has at most one pending vote: a new one replaces it.
//
// Apply refuses, changing nothing:
//   - a figure out of range (CodeMalformed);
//   - a federation whose first registration fixed no rules at all
//     (CodeBadState);
//   - a peer that does not act for the organisation, or a removed
//     organisation (CodeNotOwner), an unregistered one (CodeUnknownOrg);
//   - a vote for the rule in force (CodeBadState), or the same vote as the
//     organisation's pending one (CodeExists).
//
// Otherwise the vote is recorded (a note says how many more are needed),
// or, when it makes a strict majority for its rule, the rule is in force.
type RetentionVote struct {
	AfterMs int64 `json:"after_ms,omitempty" since:"3"`
	Keep    int64 `json:"keep,omitempty" since:"3"`
}

func (*RetentionVote) Kind() Kind { return KindRetentionVote }

func (b *RetentionVote) validate() *Error {
	if b.AfterMs < 0 || b.AfterMs > MaxRetentionMs || b.Keep < 0 || b.Keep > MaxQueuedPerOrgLimit {
		return errf(CodeMalformed, "retention_vote: after_ms %d or keep %d out of range [0, %d], [0, %d]",
			b.AfterMs, b.Keep, int64(MaxRetentionMs), int64(MaxQueuedPerOrgLimit))
	}
	return nil
}

// rule is the rule the vote names, nil for no rule.
func (b *RetentionVote) rule() *Retention {
	if b.AfterMs == 0 && b.Keep == 0 {
		return nil
	}
	return &Retention{AfterMs: b.AfterMs, Keep: b.Keep}
}

func (b *RetentionVote) same(r *Retention) bool {
	if r == nil {
		return b.AfterMs == 0 && b.Keep == 0
	}
	return r.AfterMs == b.AfterMs && r.Keep == b.Keep
}

func (b *RetentionVote) String() string {
	if b.rule() == nil {
		return "no retention"
	}
	return fmt.Sprintf("retention after_ms %d keep %d", b.AfterMs, b.Keep)
}

// RetentionVoteRecord is a pending vote of Voter for a rule.
type RetentionVoteRecord struct {
	Voter   string `json:"voter"`
	AfterMs int64  `json:"after_ms,omitempty"`
	Keep    int64  `json:"keep,omitempty"`
	Index   uint64 `json:"index"`
}

func (b *RetentionVote) check(l *Ledger, c *Command) (change, *Error) {
	if l.rules == nil {
		return nil, errf(CodeBadState, "this federation registered no rules: its retention cannot be voted")
	}
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	if b.same(l.rules.Retention) {
		return nil, errf(CodeBadState, "%s is already the federation's rule", b)
	}
	var voters []string
	for _, v := range l.retVotes {
		if v.Voter == c.Org {
			if v.AfterMs == b.AfterMs && v.Keep == b.Keep {
				return nil, errf(CodeExists, "%q already voted for %s (entry %d)", c.Org, b, v.Index)
			}
			continue // replaced by this vote
		}
		if v.AfterMs == b.AfterMs && v.Keep == b.Keep && l.removedOrg(v.Voter) == nil {
			voters = append(voters, v.Voter)
		}
	}
	voters = append(voters, c.Org)
	active := l.activeOrgs()
	if 2*len(voters) <= active {
		return func(index uint64, res *Result) {
			l.retVotes = slices.DeleteFunc(l.retVotes, func(v *RetentionVoteRecord) bool { return v.Voter == c.Org })
			l.retVotes = append(l.retVotes, &RetentionVoteRecord{Voter: c.Org, AfterMs: b.AfterMs, Keep: b.Keep, Index: index})
			res.Notes = append(res.Notes, "vote recorded: "+strconv.Itoa(len(voters))+" of "+strconv.Itoa(active)+
				" organisations want "+b.String()+"; more than half must")
		}, nil
	}
	slices.Sort(voters)
	return func(index uint64, res *Result) {
		rules := *l.rules
		rules.Retention = b.rule()
		l.rules = &rules
		l.retVotes = nil
		res.Notes = append(res.Notes, b.String()+" in force, voted by "+strings.Join(voters, ", "))
	}, nil
}

// RetentionVotes lists the pending retention votes, in log order, removed
// organisations' included (they no longer count).
func (l *Ledger) RetentionVotes() []RetentionVoteRecord {
	out := make([]RetentionVoteRecord, len(l.retVotes))
	for i, v := range l.retVotes {
		out[i] = *v
	}
	return out
}

// restoreRetentionVotes takes a snapshot's pending retention votes.
func (l *Ledger) restoreRetentionVotes(votes []*RetentionVoteRecord) error {
	if slices.Contains(votes, nil) {
		return fmt.Errorf("a null retention vote")
	}
	l.retVotes = votes
	return nil
}

// retentionVoteInvariants: every pending vote is of a registered
// organisation, one per organisation, in log order, for a valid rule that
// is not the rule in force.
func (l *Ledger) retentionVoteInvariants(fail func(string, ...any)) {
	seen := map[string]bool{}
	var last uint64
	for _, v := range l.retVotes {
		b := RetentionVote{AfterMs: v.AfterMs, Keep: v.Keep}
		switch {
		case l.orgs[v.Voter] == nil:
			fail("retention vote of unregistered organisation %q", v.Voter)
		case seen[v.Voter]:
			fail("organisation %q has two pending retention votes", v.Voter)
		case b.validate() != nil || l.rules == nil || b.same(l.rules.Retention):
			fail("pending retention vote of %q for %s: invalid or already in force", v.Voter, b.String())
		case v.Index <= last:
			fail("retention vote of %q at entry %d out of log order", v.Voter, v.Index)
		}
		seen[v.Voter] = true
		last = v.Index
	}
}
