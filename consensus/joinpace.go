package consensus

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/coopgrid/coopgrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Admissions are paced (issue 17): a new peer first receives the whole log
// (or a snapshot) from the leader and applies it, then the voters and a
// few others dial it (mesh.go) and it registers its organisation. On a small host where many peers
// start at once, admitting every joiner the moment it asks had dozens
// catching up together: the host starved, the voters missed the `lan`
// preset's heartbeats and the federation spent minutes electing
// (docs/BENCHMARKS.md, "100 peers"). So the leader admits a new peer only
// while fewer than Config.MaxCatchingUp peers it admitted are still
// catching up, and answers the others CodeAdmissionPaced, which a joiner
// takes as "you are in the queue": it asks again after a backoff, and the
// answer counts as progress for its join timeout (node.joinPatiently).
//
// A peer is catching up from its admission until its stats (ProtoStats,
// asked by the leader) say its log holds the entry that admitted it; it
// stops counting when it leaves the configuration, or after
// Config.CatchUpTimeout (a joiner that died must not close the door for
// good). A peer joining again while a member is never paced, and a new
// leader starts with nobody catching up: pacing bounds the load, it
// decides no membership.

// CodeAdmissionPaced: the leader admits no new peer right now because
// others it admitted are still catching up; ask again shortly. Nothing was
// changed. A joiner of an older release does not know the code and stops
// (its `peer run` exits; start it again).
const CodeAdmissionPaced = "admission_paced"

// catchUpRecheck bounds how often the leader asks one catching-up peer for
// its stats while joiners wait.
const catchUpRecheck = 250 * time.Millisecond

// catchingUp is the leader's record of the peers it admitted that have not
// caught up yet.
type catchingUp struct {
	mu      sync.Mutex
	pending map[peer.ID]*admitted
}

type admitted struct {
	index   uint64    // the configuration entry that admitted the peer
	at      time.Time // when it was admitted
	checked time.Time // when its stats were last asked
}

// add records a peer admitted by the configuration entry at index.
func (c *catchingUp) add(id peer.ID, index uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[peer.ID]*admitted{}
	}
	c.pending[id] = &admitted{index: index, at: now}
}

// count is how many peers are still catching up.
func (c *catchingUp) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// reset forgets every peer (a new leadership, whose predecessor's
// admissions this node does not know).
func (c *catchingUp) reset() {
	c.mu.Lock()
	c.pending = nil
	c.mu.Unlock()
}

// due drops the peers that left the configuration or waited longer than
// timeout and returns those whose stats should be asked now, with the
// index each must reach.
func (c *catchingUp) due(member func(peer.ID) bool, timeout time.Duration, now time.Time) (map[peer.ID]uint64, []peer.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ask := map[peer.ID]uint64{}
	var expired []peer.ID
	for id, a := range c.pending {
		switch {
		case !member(id):
			delete(c.pending, id)
		case timeout > 0 && now.Sub(a.at) > timeout:
			delete(c.pending, id)
			expired = append(expired, id)
		case now.Sub(a.checked) >= catchUpRecheck:
			a.checked = now
			ask[id] = a.index
		}
	}
	return ask, expired
}

// done forgets a peer that caught up.
func (c *catchingUp) done(id peer.ID) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// CatchingUp is how many peers this leader admitted that are still
// catching up (0 on a follower, or when pacing is off).
func (n *Node) CatchingUp() int { return n.joins.count() }

// admissionPaced says whether a new peer must wait, refreshing the record
// of the peers catching up first (their stats, asked in parallel). It runs
// under memberMu, on the leader.
func (n *Node) admissionPaced(ctx context.Context) error {
	limit := n.cfg.MaxCatchingUp
	if limit <= 0 || n.joins.count() < limit {
		return nil
	}
	ask, expired := n.joins.due(n.IsMember, n.cfg.CatchUpTimeout, time.Now())
	for _, id := range expired {
		n.log.Warn("consensus: an admitted peer did not catch up in time; admitting others", "peer", id, "after", n.cfg.CatchUpTimeout)
	}
	var wg sync.WaitGroup
	for id, index := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n.caughtUp(ctx, id, index) {
				n.joins.done(id)
			}
		}()
	}
	wg.Wait()
	if k := n.joins.count(); k >= limit {
		return errorf(CodeAdmissionPaced, "admission paced: %d peers admitted before are still catching up (at most %d at once); ask again shortly", k, limit)
	}
	return nil
}

// caughtUp asks id for its stats: its log holds the entry at index.
func (n *Node) caughtUp(ctx context.Context, id peer.ID, index uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, min(n.cfg.TransportTimeout, time.Second))
	defer cancel()
	b, err := n.host.Request(ctx, id, ProtoStats, nil)
	if err != nil {
		return false
	}
	var st serverStats
	return json.Unmarshal(b, &st) == nil && st.LastIndex >= index
}

// paced says whether err is the leader's CodeAdmissionPaced.
func paced(err error) bool { return p2p.Code(err) == CodeAdmissionPaced }
