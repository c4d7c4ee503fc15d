package consensus

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// TestFollowerCatchesUpAfterItsLogRefusedWrites: a follower whose Raft
// log refuses writes (as on a full disk) while the others commit catches
// up once it accepts them again, round after round. With hashicorp/raft's
// pipelined replication the leader's replication to such a follower
// could deadlock for good (see noPipeline): the chaos harness's full
// disk left a follower behind in about one run in three.
func TestFollowerCatchesUpAfterItsLogRefusedWrites(t *testing.T) {
	var switches sync.Map // raft data dir → *atomic.Bool
	c := newCluster(t, 3, 1, func(cfg *Config) {
		full := &atomic.Bool{}
		switches.Store(cfg.DataDir, full)
		cfg.storeFail = func() error {
			if full.Load() {
				return errors.New("write raft.db: no space left on device (injected)")
			}
			return nil
		}
	})
	leader := c.waitLeader()
	var follower *tpeer
	for _, p := range c.peers {
		if p != leader {
			follower = p
			break
		}
	}
	sw, ok := switches.Load(filepath.Join(follower.dir, "raft"))
	if !ok {
		t.Fatalf("no store switch for %s", follower.name)
	}
	full := sw.(*atomic.Bool)
	for round := range 8 {
		full.Store(true)
		// A stream of concurrent proposals: entries keep going to the
		// follower, more than one in flight, while it refuses them.
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 15 {
					submit(t, leader, 1)
				}
			}()
		}
		wg.Wait()
		before, _ := follower.node.Hash()
		full.Store(false)
		c.converge()
		after, _ := follower.node.Hash()
		if before == after {
			t.Fatalf("round %d: the follower's state did not move after its log accepted writes again", round)
		}
	}
}
