package consensus

import (
	"time"

	"github.com/hashicorp/raft"
)

// One AppendEntries per entry for a non-voter (issue 17, forming 100
// peers). Raft's replication loop sends a follower a new entry with the
// commit index of the moment (below the entry: the voters have not stored
// it yet), then the commit a CommitTimeout later in an AppendEntries of its
// own; and a loop parked in a paced wait (pacing.go) that news ends first
// sends the empty request it was built with, then the entries. So a
// non-voter received two or three RPCs for each entry, every one an
// exchange over its connection, a wake-up on both ends and, for the
// entries, a bolt transaction. While 100 peers form, the members' share of
// the CPU grows with them for this reason first (docs/BENCHMARKS.md,
// "Forming 100 peers, session 11"). So the leader gathers what goes to a
// non-voter into one request:
//
//   - A request to a non-voter (not a heartbeat) takes, just before it
//     leaves, the entries the leader stored since Raft built it, up to
//     MaxAppendEntries in all: the parked, woken request carries the news
//     itself instead of going empty.
//   - A request that carries entries then waits until the leader has
//     committed its last entry (the leader's FSM applying a batch ends the
//     wait, fsm.afterBatch), at most gatherWait, and goes with that commit
//     index (refreshCommit, capped at its last entry). The non-voter
//     applies the entries as soon as it stores them, no later than it did
//     when the commit came in a request of its own; the leader's
//     CommitTimeout request that follows carries no news and is paced.
//   - A request holding a configuration entry that makes its receiver a
//     voter does not wait (the commit may need its acknowledgement), and
//     after any configuration entry the pacer reads the suffrage again
//     before the next request.
//
// Safety does not depend on the timing: the entries taken are the
// leader's own log, read while it leads in the request's term (read
// first, the leadership checked after; a leader's log is not rewritten
// during its term, and a peer that stepped down never leads that term
// again), contiguous after the request's last entry; Raft's replication
// loop counts them as sent (updateLastAppended reads the request it
// passed). The commit index put in a request is one the leader committed
// in that term, capped at the request's last entry: once the receiver has
// stored the request's entries, its log matches the leader's up to there
// (the receiver commits the minimum of the index and its own last entry,
// and beyond the request's entries its log is unchecked). A non-voter
// counts toward no quorum, so its waiting holds back no commit; a wait
// that the commit does not end (voters unreachable) ends at gatherWait
// and the request goes as before.

// makesVoter says whether one of entries is a configuration in which id
// votes (an entry that cannot be read counts as one).
func makesVoter(id raft.ServerID, entries []*raft.Log) bool {
	for _, e := range entries {
		if e.Type == raft.LogConfiguration && votesIn(e.Data, id) {
			return true
		}
	}
	return false
}

// votesIn says whether the encoded configuration data makes id a voter.
func votesIn(data []byte, id raft.ServerID) (votes bool) {
	defer func() {
		if recover() != nil { // raft.DecodeConfiguration panics on bad data
			votes = true
		}
	}()
	for _, s := range raft.DecodeConfiguration(data).Servers {
		if s.ID == id {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

// gatherWaitDefault bounds the wait of a non-voter's entries for their
// commit: past it (a leader that cannot reach its voters) they go without.
const gatherWaitDefault = 200 * time.Millisecond

// gather extends args, a request to the non-voter id, with the entries the
// leader stored since it was built and, if it then carries entries, waits
// until the leader committed them (at most t.gatherWait). It reports
// whether it changed or held args (its commit index is then refreshed).
func (t *pacedTransport) gather(id raft.ServerID, args *raft.AppendEntriesRequest) bool {
	if t.leaderLog == nil || t.leaderCommit == nil || isHeartbeat(args) {
		return false
	}
	last := lastInRequest(args)
	changed := false
	if room := t.maxAppend - len(args.Entries); room > 0 {
		if more := t.leaderLog(args.Term, last+1, room); len(more) > 0 {
			args.Entries = append(args.Entries, more...)
			last, changed = lastInRequest(args), true
		}
	}
	if len(args.Entries) == 0 {
		return changed
	}
	for _, e := range args.Entries {
		if e.Type == raft.LogConfiguration {
			t.mu.Lock()
			t.readAt = time.Time{} // the suffrage may change: read it again
			t.mu.Unlock()
			break
		}
	}
	if makesVoter(id, args.Entries) {
		return changed
	}
	timer := time.NewTimer(time.Duration(t.gatherWait.Load()))
	defer timer.Stop()
	for {
		applied := t.appliedChan()
		if c, ok := t.leaderCommit(args.Term); !ok || c >= last {
			return true
		}
		select {
		case <-applied:
		case <-timer.C:
			return true
		case <-t.done:
			return true
		}
	}
}

// lastInRequest is the index of the last entry args carries (its previous
// entry when it carries none).
func lastInRequest(args *raft.AppendEntriesRequest) uint64 {
	if n := len(args.Entries); n > 0 {
		return args.Entries[n-1].Index
	}
	return args.PrevLogEntry
}

// appliedChan is the channel the leader's next applied batch (or stored
// entries) closes: taken before the commit index is read, so that a commit
// between the read and the wait is not missed.
func (t *pacedTransport) appliedChan() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.appliedWaited = true
	return t.applied
}

// isNonVoter says whether id is a non-voter in the suffrage the pacer read.
func (t *pacedTransport) isNonVoter(id raft.ServerID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nonVoter[id]
}

// leaderLog is the leader's log from index from on, at most max entries,
// if this peer leads in term once they are read (nil otherwise): the
// entries gather adds to a request of that term.
func (n *Node) leaderLog(term, from uint64, max int) []*raft.Log {
	r := n.gate.raft.Load()
	if r == nil || max <= 0 {
		return nil
	}
	last, err := n.logs.LastIndex()
	if err != nil || last < from {
		return nil
	}
	var out []*raft.Log
	for i := from; i <= last && len(out) < max; i++ {
		l := new(raft.Log)
		if err := n.logs.GetLog(i, l); err != nil {
			break
		}
		out = append(out, l)
	}
	if r.State() != raft.Leader || r.CurrentTerm() != term {
		return nil
	}
	return out
}
