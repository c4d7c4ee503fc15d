package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// SnapshotVersion is the snapshot format this ledger writes. It reads
// every version from MinSnapshotVersion on:
//   - 1: organisations, machines, tasks;
//   - 2: adds the replay guard's remembered submits (state.requests),
//     absent from a version 1 snapshot, which restores with none.
//
// The federation's rules (state.rules) and, under them, the machines'
// observed runs and the segments' starting work (issue 15) are optional
// fields of version 2, omitted when unset: a snapshot of a federation
// without rules is byte for byte what the code before them wrote, and one
// with rules is refused by that code as an unknown field.
const (
	SnapshotVersion    = 2
	MinSnapshotVersion = 1
)

// MaxSnapshotBytes bounds what Restore reads.
const MaxSnapshotBytes = 4 << 30

// canonical is the whole replicated state in a fixed order: organisations
// by registration, machines by ID, tasks by submit sequence. It is what
// Hash digests and what a snapshot carries. The applied index is not part
// of it: two ledgers that hold the same state hash the same, and a rejected
// command leaves the hash unchanged.
//
// Requests (the replay guard, by log index) is omitted when empty, so a
// state without remembered submits encodes, and hashes, as it did before
// the guard existed.
type canonical struct {
	Seq      uint64          `json:"seq"`
	Orgs     []*Org          `json:"orgs"`
	Machines []*Machine      `json:"machines"`
	Tasks    []*Task         `json:"tasks"`
	Requests []*SubmitRecord `json:"requests,omitempty"`
	// Rules are omitted on a federation without them, which encodes and
	// hashes as before they existed.
	Rules *Rules `json:"rules,omitempty"`
	// Membership (admissions, removal votes, removed organisations) is
	// omitted when empty, like Requests: a state without it hashes as
	// before it existed.
	Membership *canonicalMembers `json:"membership,omitempty"`
	// ScheduledAtMs is the time of the last schedule trigger (schedule.go),
	// omitted before the first: a state without one hashes as before
	// triggers existed.
	ScheduledAtMs int64 `json:"scheduled_at_ms,omitempty"`
	// Forgotten holds what forgotten tasks left behind (retention.go),
	// omitted before the first: a state without it hashes as before.
	Forgotten map[string]*ForgottenTotals `json:"forgotten,omitempty"`
	// JobPolicy (jobpolicy.go) is omitted until the first vote: a state
	// without one hashes as before job policies existed.
	JobPolicy *canonicalJobPol `json:"job_policy,omitempty"`
	// Stability (stability.go) is omitted until the federation tracks
	// it: a state without it hashes as before.
	Stability *stabilityState `json:"stability,omitempty"`
	// RetentionVotes are the pending retention votes (retentionvote.go),
	// omitted when there is none: a state without them hashes as before.
	RetentionVotes []*RetentionVoteRecord `json:"retention_votes,omitempty"`
}

type snapshotFile struct {
	V       int    `json:"v"`
	Applied uint64 `json:"applied"`
	// Hash is Hash() of State: a snapshot altered on disk or in transit in a
	// way that still parses is caught by it.
	Hash  string    `json:"hash"`
	State canonical `json:"state"`
}

// canonical shares the ledger's records (no copies): it is encoded at once
// and never kept.
func (l *Ledger) canonical() canonical {
	c := canonical{
		Seq:        l.seq,
		Orgs:       make([]*Org, 0, len(l.order)),
		Machines:   make([]*Machine, 0, len(l.machines)),
		Tasks:      l.bySeq,
		Requests:   l.canonicalRequests(),
		Rules:      l.rules,
		Membership: l.canonicalMembership(),

		ScheduledAtMs: l.scheduledMs,
		Forgotten:     l.canonicalForgotten(),
		JobPolicy:     l.canonicalJobPolicy(),
		Stability:     l.stability,

		RetentionVotes: l.retVotes,
	}
	for _, n := range l.order {
		c.Orgs = append(c.Orgs, l.orgs[n])
	}
	for _, id := range sortedKeys(l.machines) {
		c.Machines = append(c.Machines, l.machines[id])
	}
	return c
}

func hashOf(c *canonical) (string, error) {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(c); err != nil {
		return "", fmt.Errorf("encode ledger state: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Hash is the sha256 (hex) of the canonical encoding of the whole state.
// Peers at the same applied index have the same hash. It is computed once
// per applied index (hashmemo.go).
func (l *Ledger) Hash() string { return l.memo.get(l.applied, l.computeHash) }

func (l *Ledger) computeHash() string {
	c := l.canonical()
	h, err := hashOf(&c)
	if err != nil {
		// The state holds only strings, integers, bools, slices and string
		// maps: encoding cannot fail. Return a value that equals no hash
		// rather than panic.
		return "error: " + err.Error()
	}
	return h
}

// WriteSnapshot writes the applied index and the whole state, versioned and
// self-checking.
func (l *Ledger) WriteSnapshot(w io.Writer) error {
	s := snapshotFile{V: SnapshotVersion, Applied: l.applied, State: l.canonical()}
	h, err := hashOf(&s.State)
	if err != nil {
		return fmt.Errorf("write ledger snapshot: %w", err)
	}
	s.Hash = h
	b, err := json.Marshal(&s)
	if err != nil {
		return fmt.Errorf("write ledger snapshot: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write ledger snapshot: %w", err)
	}
	return nil
}

// Restore replaces the ledger's state with the snapshot read from r. It
// rejects an unknown version, a snapshot that does not decode strictly, one
// whose hash does not match its content and one whose state breaks an
// invariant; in every such case the ledger keeps its previous state.
func (l *Ledger) Restore(r io.Reader) error {
	// A bytes.Buffer grows by doubling: io.ReadAll's smaller steps copied
	// a snapshot of megabytes many times over (issue 17: restart cost).
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(r, MaxSnapshotBytes+1)); err != nil {
		return fmt.Errorf("restore ledger snapshot: read: %w", err)
	}
	data := buf.Bytes()
	if len(data) > MaxSnapshotBytes {
		return fmt.Errorf("restore ledger snapshot: more than %d bytes", int64(MaxSnapshotBytes))
	}
	v, err := snapshotVersion(data)
	if err != nil {
		return fmt.Errorf("restore ledger snapshot: decode: %w", err)
	}
	if v == nil {
		return fmt.Errorf("restore ledger snapshot: no version field \"v\"")
	}
	if *v < MinSnapshotVersion || *v > SnapshotVersion {
		return fmt.Errorf("restore ledger snapshot: version %d: this ledger reads versions %d to %d", *v, MinSnapshotVersion, SnapshotVersion)
	}
	var s snapshotFile
	if err := decodeStrict(data, &s); err != nil {
		return fmt.Errorf("restore ledger snapshot: decode: %w", err)
	}
	if s.V == 1 && s.State.Requests != nil {
		return fmt.Errorf("restore ledger snapshot: version 1 has no request records")
	}
	if s.V == 1 && s.State.Rules != nil {
		return fmt.Errorf("restore ledger snapshot: version 1 has no rules")
	}
	h, err := hashOf(&s.State)
	if err != nil {
		return fmt.Errorf("restore ledger snapshot: %w", err)
	}
	if h != s.Hash {
		return fmt.Errorf("restore ledger snapshot: state hash %s does not match the recorded %s (corrupted)", h, s.Hash)
	}
	nl, err := fromCanonical(s.Applied, &s.State)
	if err != nil {
		return fmt.Errorf("restore ledger snapshot: %w", err)
	}
	if err := nl.CheckInvariants(); err != nil {
		return fmt.Errorf("restore ledger snapshot: %w", err)
	}
	*l = *nl
	return nil
}

// fromCanonical builds a ledger from a decoded state, rebuilding the
// derived indexes. It rejects duplicates and dangling references that the
// maps would otherwise silently merge.
func fromCanonical(applied uint64, c *canonical) (*Ledger, error) {
	l := New()
	l.applied = applied
	l.seq = c.Seq
	for i, o := range c.Orgs {
		if o == nil {
			return nil, fmt.Errorf("organisation %d is null", i)
		}
		if _, dup := l.orgs[o.Name]; dup {
			return nil, fmt.Errorf("organisation %q twice", o.Name)
		}
		if other, dup := l.peers[o.Peer]; dup {
			return nil, fmt.Errorf("peer %s acts for %q and %q", o.Peer, other, o.Name)
		}
		if i > 0 && o.RegisteredAt <= c.Orgs[i-1].RegisteredAt {
			return nil, fmt.Errorf("organisations not in registration order at %q", o.Name)
		}
		l.orgs[o.Name] = o
		l.order = append(l.order, o.Name)
		l.peers[o.Peer] = o.Name
		l.byOrgM[o.Name] = map[string]struct{}{}
	}
	for i, m := range c.Machines {
		if m == nil {
			return nil, fmt.Errorf("machine %d is null", i)
		}
		if _, dup := l.machines[m.ID]; dup {
			return nil, fmt.Errorf("machine %q twice", m.ID)
		}
		if l.orgs[m.Org] == nil {
			return nil, fmt.Errorf("machine %q: unknown organisation %q", m.ID, m.Org)
		}
		l.putMachine(m)
	}
	for i, t := range c.Tasks {
		if t == nil {
			return nil, fmt.Errorf("task %d is null", i)
		}
		if _, dup := l.tasks[t.ID]; dup {
			return nil, fmt.Errorf("task %q twice", t.ID)
		}
		if i > 0 && t.Seq <= c.Tasks[i-1].Seq {
			return nil, fmt.Errorf("tasks not in submit order at %q", t.ID)
		}
		l.tasks[t.ID] = t
		l.bySeq = append(l.bySeq, t)
	}
	if err := l.restoreRequests(c.Requests); err != nil {
		return nil, err
	}
	if c.Rules != nil {
		r := *c.Rules
		l.rules = &r
	}
	if err := l.restoreMembership(c.Membership); err != nil {
		return nil, err
	}
	if c.ScheduledAtMs != 0 && (l.rules == nil || l.rules.Scheduling == nil) {
		return nil, fmt.Errorf("a schedule trigger at %d ms on a federation without scheduling settings", c.ScheduledAtMs)
	}
	if c.ScheduledAtMs < 0 || c.ScheduledAtMs > MaxTimeMs {
		return nil, fmt.Errorf("last schedule trigger at %d ms out of range", c.ScheduledAtMs)
	}
	l.scheduledMs = c.ScheduledAtMs
	if err := l.restoreForgotten(c.Forgotten); err != nil {
		return nil, err
	}
	if err := l.restoreRetentionVotes(c.RetentionVotes); err != nil {
		return nil, err
	}
	if err := l.restoreJobPolicy(c.JobPolicy); err != nil {
		return nil, err
	}
	if c.Stability != nil {
		if c.Stability.FromMs < 0 || c.Stability.FromMs > MaxTimeMs {
			return nil, fmt.Errorf("stability tracked from %d ms: out of range", c.Stability.FromMs)
		}
		st := *c.Stability
		l.stability = &st
	}
	l.rebuildDerived()
	l.rebuildGangs()
	l.buildQueue()
	return l, nil
}

// rebuildDerived recomputes pi, alloc and stopping from the stored state.
// Dangling references are skipped here and reported by CheckInvariants.
func (l *Ledger) rebuildDerived() {
	l.pi = map[string]int64{}
	l.alloc = map[string]int64{}
	l.stopping = map[string]map[string]int{}
	l.unfinished = map[string]int64{}
	for _, t := range l.tasks {
		if !t.State.Terminal() {
			l.unfinished[t.Org]++
		}
		if t.State.Placed() {
			if m := l.machines[t.Machine]; m != nil {
				sh := m.share(t)
				l.pi[t.Org] += sh.Of(m.BusyMilliW)
				l.alloc[t.Org] += sh.Of(m.MFLOPS)
			}
		}
		for _, s := range t.Segments {
			if s.Outcome == OutcomePreempting || s.Outcome == OutcomeCancelling {
				if l.stopping[s.Machine] == nil {
					l.stopping[s.Machine] = map[string]int{}
				}
				l.stopping[s.Machine][t.ID]++
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// snapshotVersion reads the snapshot's "v" field (nil when it has none)
// without decoding the rest: WriteSnapshot writes it first, so a restart
// does not scan megabytes of state for it before the decode proper. Any
// other member is skipped until "v" is found; the value that follows is
// decoded (and checked) by Restore.
func snapshotVersion(data []byte) (*int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil {
		return nil, err
	} else if t != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object, got %v", t)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if key, _ := t.(string); key == "v" {
			var v *int
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			return v, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return nil, nil
}
