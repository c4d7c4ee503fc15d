package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
)

// The faults of this file go through each peer's test-only fault surface
// (POST /v1/debug/faults, served because the harness starts every peer
// with --fault-injection): network partitions through the peers'
// connection gaters, steps of one peer's wall clock, a slow Raft store.
// The full disk is in disk_test.go.
const (
	// faultPartitionMinority cuts a minority of followers off; the leader
	// keeps a majority.
	faultPartitionMinority = "partition-minority"
	// faultPartitionLeaderMinority cuts off a minority that holds the
	// leader: the majority elects another. With 3 peers the minority is
	// the leader alone.
	faultPartitionLeaderMinority = "partition-leader-minority"
	// faultIsolateLeader cuts the leader off from every other peer.
	faultIsolateLeader = "isolate-leader"
	// faultClockFollower / faultClockLeader step one peer's wall clock by
	// ±30 s or ±1 h (from the seed), hold, and step it back.
	faultClockFollower = "clock-jump-follower"
	faultClockLeader   = "clock-jump-leader"
	// faultClockRestart kills a follower and restarts it with its clock
	// 1 h behind (a machine that reboots with a wrong clock), then steps
	// the clock right while it runs.
	faultClockRestart = "clock-back-restart"
	// faultClockLeaderLoses steps the leader's clock by ±1 h and, while
	// it is wrong, cuts a follower off long enough for the leader to
	// declare its machines lost: the energy the ledger books for their
	// open runs must not absorb the leader's error.
	faultClockLeaderLoses = "clock-leader-loses-follower"
	// faultSlowDisk delays every Raft store write of one peer (leader or
	// follower) by 50 ms to 1 s (from the seed).
	faultSlowDisk = "slow-disk"
)

// clockSteps are the clock offsets a clock fault draws from.
var clockSteps = []time.Duration{30 * time.Second, -30 * time.Second, time.Hour, -time.Hour}

// diskDelays are the Raft store write delays a slow-disk fault draws from.
var diskDelays = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, time.Second}

// stamp is a wall-clock prefix for the scenario's log lines.
func stamp() string { return time.Now().Format("15:04:05.000") }

// injectExtra applies the faults of this file and disk_test.go; it
// reports false for a kind it does not handle. The caller waits for the
// federation to re-form afterwards.
func (c *cluster) injectExtra(f fault, rng *rand.Rand, h *history, leader *peer) bool {
	t := c.t
	// Faults that cut or skew hold past the election and heartbeat
	// timeouts: 4-8 s.
	hold := 3*time.Second + f.hold
	switch f.kind {
	case faultPartitionMinority, faultPartitionLeaderMinority, faultIsolateLeader:
		minority := c.minority(f.kind, rng, leader)
		var names []string
		for _, p := range minority {
			names = append(names, p.name)
		}
		t.Logf("%s: %s: {%s} cut off from the rest (leader %s) for %v", stamp(), f.kind, strings.Join(names, ", "), leader.name, hold)
		began := time.Now()
		c.partition(minority)
		c.partitionTookEffect(minority)
		time.Sleep(time.Until(began.Add(hold)))
		c.heal()
		t.Logf("%s: partition healed", stamp())
	case faultClockFollower, faultClockLeader:
		victim := leader
		if f.kind == faultClockFollower {
			victim = c.randomFollower(rng, leader)
		}
		step := clockSteps[rng.Intn(len(clockSteps))]
		t.Logf("%s: %s: %s's clock stepped by %v for %v", stamp(), f.kind, victim.name, step, hold)
		c.setFaults(victim, api.FaultsRequest{ClockOffsetMs: ptr(step.Milliseconds())})
		time.Sleep(hold)
		c.setFaults(victim, api.FaultsRequest{ClockOffsetMs: ptr(int64(0))})
		t.Logf("%s: %s's clock stepped back by %v", stamp(), victim.name, -step)
	case faultClockLeaderLoses:
		victim := c.randomFollower(rng, leader)
		step := clockSteps[2+rng.Intn(2)] // ±1 h
		t.Logf("%s: %s: %s's clock (the leader's) stepped by %v; %s cut off for %v", stamp(), f.kind, leader.name, step, victim.name, hold)
		c.setFaults(leader, api.FaultsRequest{ClockOffsetMs: ptr(step.Milliseconds())})
		began := time.Now()
		c.partition([]*peer{victim})
		c.partitionTookEffect([]*peer{victim})
		time.Sleep(time.Until(began.Add(hold)))
		c.heal()
		c.setFaults(leader, api.FaultsRequest{ClockOffsetMs: ptr(int64(0))})
		t.Logf("%s: partition healed, %s's clock right again", stamp(), leader.name)
	case faultClockRestart:
		victim := c.randomFollower(rng, leader)
		t.Logf("%s: %s: kill -9 of %s, restarted with its clock 1 h behind for %v", stamp(), f.kind, victim.name, hold)
		if err := victim.proc.Kill9(); err != nil {
			t.Fatal(err)
		}
		c.start(victim, "--fault-clock-offset", "-1h")
		c.waitCaughtUp(victim, h, h.now())
		// Its heartbeats must be accepted although their boot time is
		// older than before the restart: its machines stay up.
		c.machinesStayUp(victim, hold)
		c.setFaults(victim, api.FaultsRequest{ClockOffsetMs: ptr(int64(0))})
		t.Logf("%s: %s's clock stepped 1 h forward, to the right time", stamp(), victim.name)
	case faultSlowDisk:
		victim := c.peers[rng.Intn(len(c.peers))]
		delay := diskDelays[rng.Intn(len(diskDelays))]
		role := "follower"
		if victim == leader {
			role = "leader"
		}
		t.Logf("%s: %s: every Raft store write of %s (%s) delayed by %v for %v", stamp(), f.kind, victim.name, role, delay, hold)
		c.setFaults(victim, api.FaultsRequest{DiskDelayMs: ptr(delay.Milliseconds())})
		time.Sleep(hold)
		c.logLag(victim)
		c.setFaults(victim, api.FaultsRequest{DiskDelayMs: ptr(int64(0))})
	case faultDiskFullLeader, faultDiskFullFollower:
		c.diskFull(f, rng, h, hold)
	default:
		return false
	}
	return true
}

func ptr[T any](v T) *T { return &v }

// dumpGoroutines stops every running peer with SIGQUIT (the Go runtime
// prints every goroutine's stack to stderr: the stalled peer's and the
// leader's side of it) and copies every peer's log, the dumps included,
// to a directory that outlives the test; it returns its path.
func (c *cluster) dumpGoroutines() string {
	for _, p := range c.peers {
		if p.proc != nil && !p.proc.Exited() {
			_ = p.proc.Resume()
			_ = p.proc.Cmd.Process.Signal(syscall.SIGQUIT)
		}
	}
	for _, p := range c.peers {
		if p.proc != nil {
			select {
			case <-p.proc.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
	dir, err := os.MkdirTemp("", "coopgrid-chaos-stall-")
	if err != nil {
		return err.Error()
	}
	logs := c.peers[0].logs
	if out, err := exec.Command("cp", "-a", logs+"/.", dir+"/").CombinedOutput(); err != nil {
		return fmt.Sprintf("%s (copy: %v: %s)", dir, err, out)
	}
	return dir + " (each peer's last stderr ends with its goroutine dump)"
}

// logLag logs how far p's applied index is behind the leader's: the
// visible effect of a slow disk on a follower (a slow leader slows
// everyone's commits instead).
func (c *cluster) logLag(p *peer) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	l := c.leader(ctx)
	if l == nil {
		return
	}
	lv, err1 := l.client.Ledger(ctx)
	pv, err2 := p.client.Ledger(ctx)
	if err1 == nil && err2 == nil {
		c.t.Logf("%s: end of the slow disk: %s applied %d, the leader %s %d", stamp(), p.name, pv.AppliedIndex, l.name, lv.AppliedIndex)
	}
}

// randomFollower draws a peer other than leader.
func (c *cluster) randomFollower(rng *rand.Rand, leader *peer) *peer {
	var fs []*peer
	for _, p := range c.peers {
		if p != leader {
			fs = append(fs, p)
		}
	}
	return fs[rng.Intn(len(fs))]
}

// minority draws the side of a partition that loses the majority:
// (n-1)/2 peers, with or without the leader, or the leader alone.
func (c *cluster) minority(kind string, rng *rand.Rand, leader *peer) []*peer {
	if kind == faultIsolateLeader {
		return []*peer{leader}
	}
	size := (len(c.peers) - 1) / 2
	var out []*peer
	if kind == faultPartitionLeaderMinority {
		out = append(out, leader)
	}
	for _, i := range rng.Perm(len(c.peers)) {
		if len(out) == size {
			break
		}
		if p := c.peers[i]; p != leader {
			out = append(out, p)
		}
	}
	return out
}

// peerIDs maps each peer to its libp2p ID (from its status).
func (c *cluster) peerIDs() map[*peer]string {
	ids := map[*peer]string{}
	for _, p := range c.peers {
		c.eventually(30*time.Second, p.name+"'s peer ID", func(ctx context.Context) (bool, string) {
			s, err := p.client.Status(ctx)
			ids[p] = s.Self
			return err == nil && s.Self != "", fmt.Sprint(err)
		})
	}
	return ids
}

// partition blocks, on both sides, every connection between side and the
// other peers: each peer's gater refuses the peers across the cut and
// closes the connections it has to them.
func (c *cluster) partition(side []*peer) {
	ids := c.peerIDs()
	in := map[*peer]bool{}
	for _, p := range side {
		in[p] = true
	}
	for _, p := range c.peers {
		block := []string{}
		for _, q := range c.peers {
			if in[p] != in[q] {
				block = append(block, ids[q])
			}
		}
		c.setFaults(p, api.FaultsRequest{BlockPeers: &block})
	}
}

// partitionTookEffect waits until the majority side runs on its own: its
// peers agree on a leader among themselves, and that leader holds every
// machine of the minority lost (after the 3 s heartbeat timeout). Had
// the cut let anything through, the minority's heartbeats would keep
// its machines up.
func (c *cluster) partitionTookEffect(minority []*peer) {
	c.t.Helper()
	in := map[string]bool{}
	for _, p := range minority {
		in[p.name] = true
	}
	var majority []*peer
	for _, p := range c.peers {
		if !in[p.name] {
			majority = append(majority, p)
		}
	}
	ids := c.peerIDs()
	byID := map[string]*peer{}
	for p, id := range ids {
		byID[id] = p
	}
	c.eventually(30*time.Second, "the majority side on its own", func(ctx context.Context) (bool, string) {
		leader := ""
		for _, p := range majority {
			s, err := p.client.Status(ctx)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", p.name, err)
			}
			if s.Leader == "" || (leader != "" && s.Leader != leader) {
				return false, fmt.Sprintf("%s: leader %q", p.name, s.Leader)
			}
			leader = s.Leader
		}
		l := byID[leader]
		if l == nil || in[l.name] {
			return false, "the majority follows a leader of the minority"
		}
		ms, err := l.client.Machines(ctx)
		if err != nil {
			return false, err.Error()
		}
		var up []string
		for _, m := range ms {
			if in[m.Org] && m.State != "lost" {
				up = append(up, m.ID)
			}
		}
		return len(up) == 0, fmt.Sprintf("leader %s still holds %v up", l.name, up)
	})
	c.t.Logf("%s: the majority runs on its own: the minority's machines are lost to its leader", stamp())
}

// heal clears every peer's blocked set.
func (c *cluster) heal() {
	for _, p := range c.peers {
		c.setFaults(p, api.FaultsRequest{BlockPeers: &[]string{}})
	}
}

// setFaults applies req on p through its API (which answers whatever
// the federation's state).
func (c *cluster) setFaults(p *peer, req api.FaultsRequest) {
	c.t.Helper()
	c.eventually(30*time.Second, p.name+" applies a fault", func(ctx context.Context) (bool, string) {
		_, err := p.client.SetFaults(ctx, req)
		if api.CodeOf(err) == api.CodeFaultsDisabled {
			c.t.Fatalf("%s: %v (the harness starts every peer with --fault-injection)", p.name, err)
		}
		return err == nil, fmt.Sprint(err)
	})
}

// waitCaughtUp waits until p has applied what the leader had applied
// when p came back, and records [from, then] as p's catch-up window (its
// reads in it are diagnosed separately, see check).
func (c *cluster) waitCaughtUp(p *peer, h *history, from int64) {
	c.t.Helper()
	var target uint64
	c.eventually(60*time.Second, "the leader's applied index", func(ctx context.Context) (bool, string) {
		// p may have become the leader: then it is its own reference.
		l := c.leader(ctx)
		if l == nil {
			return false, "no leader"
		}
		lv, err := l.client.Ledger(ctx)
		target = lv.AppliedIndex
		return err == nil, fmt.Sprint(err)
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		lv, err := p.client.Ledger(ctx)
		cancel()
		if err == nil && lv.AppliedIndex >= target {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s has not caught up after 2 minutes: applied %d of %d (%v); every peer's goroutines and logs: %s", p.name, lv.AppliedIndex, target, err, c.dumpGoroutines())
		}
		time.Sleep(250 * time.Millisecond)
	}
	h.mu.Lock()
	h.catchUp[p.name] = append(h.catchUp[p.name], [2]int64{from, h.now()})
	h.mu.Unlock()
	c.t.Logf("%s: %s caught up to index %d", stamp(), p.name, target)
}

// machinesStayUp checks, for d, that the leader holds every machine of p
// up once p's heartbeats have had the timeout to arrive: a peer whose
// heartbeats the others ignore has its machines declared lost over and
// over.
func (c *cluster) machinesStayUp(p *peer, d time.Duration) {
	c.t.Helper()
	prefix := p.name + "/"
	c.eventually(30*time.Second, p.name+"'s machines up", func(ctx context.Context) (bool, string) {
		ms, err := p.client.Machines(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if strings.HasPrefix(m.ID, prefix) && m.State != "up" {
				return false, m.ID + " " + m.State
			}
		}
		return true, ""
	})
	// The leader's heartbeat timeout is 3 s: longer than that, a machine
	// whose heartbeats are dropped is declared lost.
	deadline := time.Now().Add(max(d, 5*time.Second))
	samples, lost := 0, map[string]int{}
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		if l := c.leader(ctx); l != nil {
			if ms, err := l.client.Machines(ctx); err == nil {
				samples++
				for _, m := range ms {
					if strings.HasPrefix(m.ID, prefix) && m.State != "up" {
						lost[m.ID]++
					}
				}
			}
		}
		cancel()
		time.Sleep(250 * time.Millisecond)
	}
	if len(lost) > 0 {
		c.t.Errorf("%s restarted with its clock behind: the leader saw its machines lost in %v of %d samples (its heartbeats dropped?)", p.name, lost, samples)
		return
	}
	c.t.Logf("%s: %s's machines up in all %d samples of the leader's view", stamp(), p.name, samples)
}

// checkScenario skips a scenario whose faults this machine cannot inject
// (a full disk needs to mount a tmpfs), with the reason, before anything
// starts.
func checkScenario(t *testing.T, sc scenario) {
	t.Helper()
	for _, k := range sc.kinds {
		if k == faultDiskFullLeader || k == faultDiskFullFollower {
			if err := canMountTmpfs(); err != nil {
				t.Skipf("SKIPPED: scenario %s needs a size-limited tmpfs for the full disk and this machine cannot mount one: %v", sc.name, err)
			}
		}
	}
}

// randomKinds marks a matrix scenario whose four faults are drawn from
// the seed among allKinds.
var randomKinds = []string{"random"}

// allKinds are every fault the harness injects.
var allKinds = []string{faultKillLeader, faultKillFollower, faultPause,
	faultPartitionMinority, faultPartitionLeaderMinority, faultIsolateLeader,
	faultClockFollower, faultClockLeader, faultClockRestart, faultClockLeaderLoses, faultSlowDisk, faultDiskFullLeader, faultDiskFullFollower}

// checkEnergyPlausible: no run was credited more energy than its machine
// can draw in the whole scenario. Every other energy check compares the
// ledger with itself (accounts against segments); this one catches an
// estimate built from two disagreeing clocks (a run started on one
// peer's clock and declared lost on another's).
func (c *cluster) checkEnergyPlausible(began time.Time) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := c.peers[0]
	ms, err := p.client.Machines(ctx)
	if err != nil {
		t.Fatalf("machines: %v", err)
	}
	busy := map[string]float64{}
	for _, m := range ms {
		busy[m.ID] = m.BusyW
	}
	ts, err := p.client.Tasks(ctx, api.TaskQuery{})
	if err != nil {
		t.Fatalf("tasks: %v", err)
	}
	span := time.Since(began).Seconds()
	segs, declared, worst := 0, 0, 0.0
	for _, tk := range ts {
		d, err := p.client.Task(ctx, tk.ID)
		if err != nil {
			t.Fatalf("task %s: %v", tk.ID, err)
		}
		for _, s := range d.Segments {
			segs++
			if s.Source == "declared" {
				declared++
			}
			limit := busy[s.Machine] * span
			worst = max(worst, s.EnergyJ/max(busy[s.Machine], 1))
			if s.EnergyJ > limit {
				t.Errorf("task %s: run on %s credited %.3f J (%s, %s), more than its %.0f W for the whole %.0f s scenario (%.0f J): [%d, %d]",
					tk.ID, s.Machine, s.EnergyJ, s.Source, s.Outcome, busy[s.Machine], span, limit, s.StartMs, s.EndMs)
			}
		}
	}
	t.Logf("energy plausible: %d runs (%d with declared energy), the longest credited %.1f s at busy power (scenario %.0f s)", segs, declared, worst, span)
}
