package ledger

import (
	"slices"
	"strconv"
	"strings"
)

// KindMembership records a decision of the federation about who belongs to
// it: an invitation spent by an admission, or one organisation's vote to
// remove another (docs/SECURITY.md, "Membership").
const KindMembership Kind = "membership"

// Bounds of a membership command.
const (
	// MaxInvitationIDLen bounds an invitation's ID (the issuer makes 32 hex
	// digits).
	MaxInvitationIDLen = 64
	// MaxInvitationTokenBytes bounds the signed invitation kept with an
	// admission.
	MaxInvitationTokenBytes = 4096
)

// Membership is a federation decision about membership. Exactly one of
// Admit and Remove is set.
//
//   - Admit: the leader spends an invitation as it admits the invited peer
//     (only the leader appends it, after checking the inviter's signature:
//     the ledger does not hold keys). Apply checks what every peer can:
//     the inviter organisation is registered to the inviting peer and not
//     removed, the invitation has not expired by the command's AtMs, was
//     not spent, and the invited organisation is bound to no other peer.
//   - Remove: the acting organisation votes to remove another. When the
//     votes of a strict majority of the organisations that are not removed
//     (the target included) are recorded, the target is removed: its peer
//     may no longer act (every command of it is refused with not_owner),
//     and the leader takes it out of the Raft configuration and declares
//     its machines lost.
type Membership struct {
	Admit  *Admission   `json:"admit,omitempty"`
	Remove *RemovalVote `json:"remove,omitempty"`
}

func (*Membership) Kind() Kind { return KindMembership }

// leaderOnly: an admission is appended by the leader that checked the
// invitation's signature; a removal vote by any member.
func (b *Membership) leaderOnly() bool { return b.Admit != nil }

// Admission spends an invitation: Peer is admitted for Org, invited by
// InviterOrg's peer InviterPeer, until ExpiresMs. Token is the signed
// invitation as presented, kept so that anyone can check the leader's
// verification afterwards.
type Admission struct {
	Invitation  string `json:"invitation"`
	InviterOrg  string `json:"inviter_org"`
	InviterPeer string `json:"inviter_peer"`
	Org         string `json:"org"`
	Peer        string `json:"peer"`
	ExpiresMs   int64  `json:"expires_ms"`
	Token       string `json:"token"`
}

// RemovalVote is the acting organisation's vote to remove Org.
type RemovalVote struct {
	Org string `json:"org"`
}

// AdmissionRecord is an applied admission: the invitation is spent.
type AdmissionRecord struct {
	Admission
	Index uint64 `json:"index"`
	AtMs  int64  `json:"at_ms"`
}

// VoteRecord is a recorded vote of Voter to remove Target.
type VoteRecord struct {
	Target string `json:"target"`
	Voter  string `json:"voter"`
	Index  uint64 `json:"index"`
}

// RemovedOrg is an organisation removed by a federation decision: Peer,
// its peer then, may no longer act, and the organisation cannot be
// admitted again.
type RemovedOrg struct {
	Org    string   `json:"org"`
	Peer   string   `json:"peer"`
	Index  uint64   `json:"index"`
	Voters []string `json:"voters"`
}

// membership is the part of the replicated state that Membership commands
// build, in log order (what Hash and snapshots carry).
type membership struct {
	admissions []*AdmissionRecord
	votes      []*VoteRecord
	removed    []*RemovedOrg
}

func (b *Membership) validate() *Error {
	switch {
	case (b.Admit == nil) == (b.Remove == nil):
		return errf(CodeMalformed, "a membership command carries exactly one of admit, remove")
	case b.Remove != nil:
		if !validName(b.Remove.Org) {
			return errf(CodeMalformed, "remove: organisation %q is not a valid name", b.Remove.Org)
		}
		return nil
	}
	a := b.Admit
	switch {
	case a.Invitation == "" || len(a.Invitation) > MaxInvitationIDLen || !isAlnumOr(a.Invitation, ""):
		return errf(CodeMalformed, "admit: invitation ID %q: want 1-%d characters of [A-Za-z0-9]", a.Invitation, MaxInvitationIDLen)
	case !validName(a.Org) || !validName(a.InviterOrg):
		return errf(CodeMalformed, "admit: organisation %q or inviter %q is not a valid name", a.Org, a.InviterOrg)
	case !validPeer(a.Peer) || !validPeer(a.InviterPeer):
		return errf(CodeMalformed, "admit: peer %q or inviting peer %q is not a peer ID", a.Peer, a.InviterPeer)
	case a.ExpiresMs <= 0 || a.ExpiresMs > MaxTimeMs:
		return errf(CodeMalformed, "admit: expires_ms %d out of range [1, %d]", a.ExpiresMs, int64(MaxTimeMs))
	case a.Token == "" || len(a.Token) > MaxInvitationTokenBytes || !isAlnumOr(a.Token, "._-"):
		return errf(CodeMalformed, "admit: token: want 1-%d characters of [A-Za-z0-9._-]", MaxInvitationTokenBytes)
	}
	return nil
}

func (b *Membership) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	if b.Admit != nil {
		return l.checkAdmit(b.Admit, c)
	}
	return l.checkVote(b.Remove.Org, c)
}

// CheckAdmission says whether a spends an invitation that is still good at
// atMs: what Apply checks for an admission, without applying it. The
// leader asks it before it changes the Raft configuration. A nil error
// with spent true means the same admission was already recorded.
func (l *Ledger) CheckAdmission(a Admission, atMs int64) (spent bool, err *Error) {
	if e := (&Membership{Admit: &a}).validate(); e != nil {
		return false, e
	}
	inv := l.orgs[a.InviterOrg]
	switch {
	case inv == nil:
		return false, errf(CodeUnknownOrg, "inviting organisation %q is not registered", a.InviterOrg)
	case inv.Peer != a.InviterPeer:
		return false, errf(CodeNotOwner, "peer %s does not act for the inviting organisation %q", a.InviterPeer, a.InviterOrg)
	case l.removedOrg(a.InviterOrg) != nil:
		return false, errf(CodeNotOwner, "the inviting organisation %q was removed from the federation", a.InviterOrg)
	case atMs > a.ExpiresMs:
		return false, errf(CodeBadState, "invitation %s expired %d ms ago", a.Invitation, atMs-a.ExpiresMs)
	}
	if r := l.admission(a.Invitation); r != nil {
		if r.Org == a.Org && r.Peer == a.Peer {
			return true, nil
		}
		return false, errf(CodeExists, "invitation %s was already used (by peer %s for %q, entry %d)", a.Invitation, r.Peer, r.Org, r.Index)
	}
	if l.removedOrg(a.Org) != nil {
		return false, errf(CodeNotOwner, "organisation %q was removed from the federation by its members", a.Org)
	}
	if p, ok := l.boundPeer(a.Org); ok && p != a.Peer {
		return false, errf(CodeExists, "organisation %q is already bound to peer %s: one peer per organisation", a.Org, p)
	}
	if o, ok := l.boundOrg(a.Peer); ok && o != a.Org {
		return false, errf(CodeExists, "peer %s already acts for organisation %q", a.Peer, o)
	}
	return false, nil
}

func (l *Ledger) checkAdmit(a *Admission, c *Command) (change, *Error) {
	spent, err := l.CheckAdmission(*a, c.AtMs)
	if err != nil {
		return nil, err
	}
	if spent {
		return func(_ uint64, res *Result) {
			res.Notes = append(res.Notes, "invitation "+a.Invitation+" was already spent by this admission")
		}, nil
	}
	return func(index uint64, _ *Result) {
		l.members.admissions = append(l.members.admissions, &AdmissionRecord{Admission: *a, Index: index, AtMs: c.AtMs})
	}, nil
}

func (l *Ledger) checkVote(target string, c *Command) (change, *Error) {
	t := l.orgs[target]
	switch {
	case t == nil:
		return nil, errf(CodeUnknownOrg, "organisation %q is not registered", target)
	case target == c.Org:
		return nil, errf(CodeBadState, "an organisation does not vote on its own removal: its peer leaves (peer leave)")
	case l.removedOrg(target) != nil:
		return nil, errf(CodeBadState, "organisation %q is already removed", target)
	}
	var voters []string
	for _, v := range l.members.votes {
		if v.Target != target || l.removedOrg(v.Voter) != nil {
			continue
		}
		if v.Voter == c.Org {
			return nil, errf(CodeExists, "%q already voted to remove %q (entry %d)", c.Org, target, v.Index)
		}
		voters = append(voters, v.Voter)
	}
	voters = append(voters, c.Org)
	active := 0
	for _, name := range l.order {
		if l.removedOrg(name) == nil {
			active++
		}
	}
	if 2*len(voters) <= active {
		return func(index uint64, res *Result) {
			l.members.votes = append(l.members.votes, &VoteRecord{Target: target, Voter: c.Org, Index: index})
			res.Notes = append(res.Notes, "vote recorded: "+strconv.Itoa(len(voters))+" of "+strconv.Itoa(active)+" organisations want "+target+" removed; more than half must")
		}, nil
	}
	slices.Sort(voters)
	return func(index uint64, res *Result) {
		l.members.votes = slices.DeleteFunc(l.members.votes, func(v *VoteRecord) bool { return v.Target == target })
		l.members.removed = append(l.members.removed, &RemovedOrg{Org: target, Peer: t.Peer, Index: index, Voters: voters})
		res.Notes = append(res.Notes, "organisation "+target+" removed by "+strings.Join(voters, ", "))
	}, nil
}

// checkBinding is RegisterOrg's membership rule: an organisation admitted
// for a peer is registered by that peer only, a peer admitted for an
// organisation registers only that one, and a removed organisation never
// registers again. Logs without admissions (before invitations existed, or
// the federation's first peer) are unaffected.
func (l *Ledger) checkBinding(c *Command) *Error {
	if l.removedOrg(c.Org) != nil {
		return errf(CodeNotOwner, "organisation %q was removed from the federation by its members", c.Org)
	}
	for _, r := range l.members.admissions {
		if r.Org == c.Org && r.Peer != c.Peer {
			return errf(CodeExists, "organisation %q was admitted for peer %s: one peer per organisation", c.Org, r.Peer)
		}
		if r.Peer == c.Peer && r.Org != c.Org {
			return errf(CodeNotOwner, "peer %s was admitted for organisation %q, not %q", c.Peer, r.Org, c.Org)
		}
	}
	return nil
}

// checkNotRemoved refuses the commands of a removed organisation.
func (l *Ledger) checkNotRemoved(org string) *Error {
	if r := l.removedOrg(org); r != nil {
		return errf(CodeNotOwner, "organisation %q was removed from the federation at entry %d", org, r.Index)
	}
	return nil
}

func (l *Ledger) admission(id string) *AdmissionRecord {
	for _, r := range l.members.admissions {
		if r.Invitation == id {
			return r
		}
	}
	return nil
}

func (l *Ledger) removedOrg(org string) *RemovedOrg {
	for _, r := range l.members.removed {
		if r.Org == org {
			return r
		}
	}
	return nil
}

// boundPeer is the peer org is registered or admitted for.
func (l *Ledger) boundPeer(org string) (string, bool) {
	if o := l.orgs[org]; o != nil {
		return o.Peer, true
	}
	for _, r := range l.members.admissions {
		if r.Org == org {
			return r.Peer, true
		}
	}
	return "", false
}

// boundOrg is the organisation peer is registered or admitted for.
func (l *Ledger) boundOrg(peer string) (string, bool) {
	if o, ok := l.peers[peer]; ok {
		return o, true
	}
	for _, r := range l.members.admissions {
		if r.Peer == peer {
			return r.Org, true
		}
	}
	return "", false
}

// Admissions lists the spent invitations, in log order.
func (l *Ledger) Admissions() []AdmissionRecord {
	out := make([]AdmissionRecord, len(l.members.admissions))
	for i, r := range l.members.admissions {
		out[i] = *r
	}
	return out
}

// RemovalVotes lists the pending votes to remove an organisation, in log
// order.
func (l *Ledger) RemovalVotes() []VoteRecord {
	out := make([]VoteRecord, len(l.members.votes))
	for i, v := range l.members.votes {
		out[i] = *v
	}
	return out
}

// Removed lists the organisations removed by a federation decision, in
// log order.
func (l *Ledger) Removed() []RemovedOrg {
	out := make([]RemovedOrg, len(l.members.removed))
	for i, r := range l.members.removed {
		out[i] = *r
		out[i].Voters = slices.Clone(r.Voters)
	}
	return out
}

// IsRemoved says whether org was removed by a federation decision.
func (l *Ledger) IsRemoved(org string) bool { return l.removedOrg(org) != nil }

// canonicalMembership is the membership state for Hash and snapshots; nil
// when there is none, so that a state without it encodes as before.
func (l *Ledger) canonicalMembership() *canonicalMembers {
	m := &l.members
	if len(m.admissions) == 0 && len(m.votes) == 0 && len(m.removed) == 0 {
		return nil
	}
	return &canonicalMembers{Admissions: m.admissions, Votes: m.votes, Removed: m.removed}
}

// canonicalMembers is the encoded membership state, each list in log order.
type canonicalMembers struct {
	Admissions []*AdmissionRecord `json:"admissions,omitempty"`
	Votes      []*VoteRecord      `json:"votes,omitempty"`
	Removed    []*RemovedOrg      `json:"removed,omitempty"`
}

// restoreMembership takes the membership state of a snapshot, checking
// that it names registered organisations and is in log order.
func (l *Ledger) restoreMembership(c *canonicalMembers) *Error {
	if c == nil {
		return nil
	}
	var last uint64
	inOrder := func(i uint64) bool { ok := i > last || last == 0; last = i; return ok }
	for _, r := range c.Admissions {
		if r == nil || !inOrder(r.Index) {
			return errf(CodeMalformed, "admissions not in log order")
		}
	}
	last = 0
	for _, v := range c.Votes {
		if v == nil || !inOrder(v.Index) || l.orgs[v.Target] == nil || l.orgs[v.Voter] == nil {
			return errf(CodeMalformed, "removal votes not in log order or naming unknown organisations")
		}
	}
	last = 0
	for _, r := range c.Removed {
		if r == nil || !inOrder(r.Index) || l.orgs[r.Org] == nil {
			return errf(CodeMalformed, "removed organisations not in log order or unknown")
		}
	}
	l.members = membership{admissions: c.Admissions, votes: c.Votes, removed: c.Removed}
	return nil
}
