package node

import (
	"context"
	"testing"
	"time"
)

// TestHeartbeatsTravel: a peer's heartbeats reach the other peers, and the
// API's machine list shows the last one heard. (The decoder's reasons are
// package gossip's TestHeartbeatValidation.)
func TestHeartbeatsTravel(t *testing.T) {
	peers := federation(t, "sim", []string{"hb-a", "hb-b"}, map[string]string{
		"hb-a": "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n",
		"hb-b": "machines:\n  - name: m1\n    gflops: 10\n    busy_watts: 100\n",
	}, nil)
	a := peers[0]
	waitFor(t, 10*time.Second, "hb-a hears hb-b's machine", func() bool { return a.n.gossip.LastHeartbeatMs("hb-b/m1") > 0 })
	ms, err := a.n.Machines(context.Background())
	if err != nil || len(ms) != 2 || ms[1].ID != "hb-b/m1" || ms[1].LastHeartbeatMs == 0 {
		t.Fatalf("machines %+v %v", ms, err)
	}
}
