package chaos

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coopgrid/coopgrid/api"
)

// A fault is one injection: what, on which peer, for how long.
type fault struct {
	kind   string // killLeader, killFollower, pause
	hold   time.Duration
	settle time.Duration // quiet time after healing, before the next fault
}

func (f fault) String() string {
	return fmt.Sprintf("%s(hold %v, settle %v)", f.kind, f.hold, f.settle)
}

const (
	faultKillLeader   = "kill-9-leader"
	faultKillFollower = "kill-9-follower"
	faultPause        = "sigstop-peer"
)

// scenario is a federation size, a workload length and a fault schedule
// drawn from seed.
type scenario struct {
	name   string
	peers  int
	kinds  []string // the faults in order; durations come from the seed
	warmup time.Duration
	drain  time.Duration // workload time after the last fault
	// maxTasks bounds each client's submitted tasks (0: none).
	maxTasks int
}

// schedule draws the fault durations from rng: kills are held 1-5 s before
// the restart, pauses 4-8 s (past the 400 ms election timeout and the 3 s
// heartbeat timeout, so the leader declares the paused peer's machines
// lost while their task processes keep running).
func (s scenario) schedule(rng *rand.Rand) []fault {
	var fs []fault
	for _, k := range s.kinds {
		f := fault{kind: k, settle: time.Duration(2000+rng.Intn(3000)) * time.Millisecond}
		switch k {
		case faultPause:
			f.hold = time.Duration(4000+rng.Intn(4000)) * time.Millisecond
		default:
			f.hold = time.Duration(1000+rng.Intn(4000)) * time.Millisecond
		}
		fs = append(fs, f)
	}
	return fs
}

// seedFor returns CHAOS_SEED when set (a replay), else a fresh seed; the
// seed is logged so that any run can be replayed.
func seedFor(t *testing.T) int64 {
	t.Helper()
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an integer: %v", s, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

// TestChaosSmoke is the one scenario `go test ./...` runs: three peers,
// a bounded workload, one peer paused with SIGSTOP past the election and
// heartbeat timeouts and resumed, every check. The fault matrix is
// TestChaos (make chaos). The smoke scenario does not kill and restart a
// peer: that currently shows a stale read (see docs/RELIABILITY.md).
func TestChaosSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real peer processes: skipped under -short")
	}
	if os.Getenv("COOPGRID_CHAOS") != "" {
		t.Skip("COOPGRID_CHAOS is set: TestChaos runs the full matrix")
	}
	seed := seedFor(t)
	runScenario(t, scenario{name: "smoke", peers: 3, kinds: []string{faultPause}, warmup: time.Second, drain: time.Second, maxTasks: 6},
		seed, fmt.Sprintf("CHAOS_SEED=%d go test -count=1 -run '^TestChaosSmoke$' ./chaos", seed))
}

// TestChaos is the fault matrix, run by `make chaos` (COOPGRID_CHAOS=1).
// Every scenario logs its seed; CHAOS_SEED replays one (with -run to pick
// the scenario).
func TestChaos(t *testing.T) {
	if os.Getenv("COOPGRID_CHAOS") == "" {
		t.Skip("the fault matrix takes minutes: run it with `make chaos` (COOPGRID_CHAOS=1)")
	}
	base := seedFor(t)
	matrix := []scenario{
		{name: "kill-leader-3", peers: 3, kinds: []string{faultKillLeader, faultKillLeader}},
		{name: "kill-follower-3", peers: 3, kinds: []string{faultKillFollower, faultKillFollower}},
		{name: "pause-3", peers: 3, kinds: []string{faultPause, faultPause}},
		{name: "random-5", peers: 5},
		// Faults through the peers' fault surface (faults_test.go,
		// disk_test.go).
		{name: "partition-3", peers: 3, kinds: []string{faultPartitionLeaderMinority, faultPartitionMinority}},
		{name: "partition-5", peers: 5, kinds: []string{faultPartitionMinority, faultPartitionLeaderMinority, faultIsolateLeader}},
		{name: "clock-3", peers: 3, kinds: []string{faultClockFollower, faultClockLeader, faultClockFollower, faultClockLeader}},
		{name: "clock-restart-3", peers: 3, kinds: []string{faultClockRestart}},
		{name: "clock-lost-3", peers: 3, kinds: []string{faultClockLeaderLoses, faultClockLeaderLoses}},
		{name: "slow-disk-3", peers: 3, kinds: []string{faultSlowDisk, faultSlowDisk}},
		{name: "disk-full-3", peers: 3, kinds: []string{faultDiskFullLeader, faultDiskFullFollower}},
		{name: "random-all-5", peers: 5, kinds: randomKinds},
		// kill -9 of a checkpoint's holder, of a checkpointed task's
		// executor (checkpoint_test.go).
		{name: "kill-ckpt-holder-3", peers: 3, kinds: []string{faultKillCkHolder, faultKillCkHolder}},
		{name: "kill-ckpt-executor-3", peers: 3, kinds: []string{faultKillCkExecutor, faultKillCkExecutor}},
	}
	for i, sc := range matrix {
		sc.warmup, sc.drain, sc.maxTasks = 3*time.Second, 3*time.Second, 30
		seed := base + int64(i)
		if sc.kinds == nil || sc.kinds[0] == randomKinds[0] {
			// A random sequence of four faults, drawn from the seed.
			rng := rand.New(rand.NewSource(seed))
			all := []string{faultKillLeader, faultKillFollower, faultPause}
			if sc.kinds != nil {
				all = allKinds
			}
			sc.kinds = nil
			for j := 0; j < 4; j++ {
				sc.kinds = append(sc.kinds, all[rng.Intn(len(all))])
			}
		}
		replay := fmt.Sprintf("CHAOS_SEED=%d make chaos (the whole matrix), or COOPGRID_CHAOS=1 CHAOS_SEED=%d go test -count=1 -v -run '^TestChaos$/^%s$' ./chaos", base, base, sc.name)
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc, seed, replay) })
	}
}

// runScenario starts the federation, runs the workload with the faults,
// heals, and checks.
// replay is the command that reruns it with the same seed.
func runScenario(t *testing.T, sc scenario, seed int64, replay string) {
	checkScenario(t, sc)
	rng := rand.New(rand.NewSource(seed))
	faults := sc.schedule(rng)
	t.Logf("scenario %s: seed %d, %d peers, faults %v; replay: %s", sc.name, seed, sc.peers, faults, replay)
	began := time.Now()
	c := newCluster(t, sc.peers)
	t.Logf("federation of %d formed in %v", sc.peers, time.Since(began).Round(time.Millisecond))

	h := newHistory()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clients []*workClient
	c.ck = c.startCheckpointWork(sc, h)
	for i := 0; i < 2*sc.peers; i++ {
		w := &workClient{id: i, peer: c.peers[i%sc.peers], rng: rand.New(rand.NewSource(seed*31 + int64(i))), h: h, maxTasks: sc.maxTasks}
		clients = append(clients, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	// PI_i ≤ Lim_i, sampled: every 500 ms each running peer's view of
	// every organisation (a committed state as that peer applied it).
	var limitMu sync.Mutex
	var limitViolations []string
	samples := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			for _, p := range c.peers {
				if !p.up() {
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				orgs, err := p.client.Orgs(cctx)
				cancel()
				if err != nil {
					continue
				}
				limitMu.Lock()
				samples++
				for _, o := range orgs {
					if o.PIW > o.LimitW {
						limitViolations = append(limitViolations, fmt.Sprintf("%s saw %s at PI %.3f W over its limit %.3f W", p.name, o.Name, o.PIW, o.LimitW))
					}
				}
				limitMu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	// Stop the workload on every exit path, so no goroutine outlives the test.
	defer func() { stop(); wg.Wait() }()

	time.Sleep(sc.warmup)
	for _, f := range faults {
		c.inject(f, rng, h)
		time.Sleep(f.settle)
	}
	time.Sleep(sc.drain)
	stop()
	wg.Wait()
	for _, w := range clients {
		for _, err := range w.errs {
			t.Errorf("workload: %v", err)
		}
	}
	t.Logf("workload: %v", h.counts)
	t.Logf("limits: %d samples of every organisation's PI and limit, %d over", samples, len(limitViolations))
	for _, v := range limitViolations {
		t.Errorf("PI over the limit: %s", v)
	}
	c.check(h)
	c.checkEnergyPlausible(began)
	c.ck.check()
	c.checkStopped(sc) // journals and `peer verify`: stops the peers
	if t.Failed() {
		t.Logf("scenario %s FAILED (seed %d); replay: %s", sc.name, seed, replay)
		return
	}
	t.Logf("scenario %s (seed %d) passed in %v", sc.name, seed, time.Since(began).Round(time.Millisecond))
}

// inject applies one fault and heals it.
func (c *cluster) inject(f fault, rng *rand.Rand, h *history) {
	t := c.t
	t.Helper()
	var leader *peer
	c.eventually(60*time.Second, "a leader before the fault", func(ctx context.Context) (bool, string) {
		leader = c.leader(ctx)
		return leader != nil, "no leader"
	})
	if c.injectCheckpoint(f, rng, h, leader) || c.injectExtra(f, rng, h, leader) {
		c.waitFormed()
		return
	}
	var victim *peer
	switch f.kind {
	case faultKillLeader:
		victim = leader
	case faultKillFollower:
		var fs []*peer
		for _, p := range c.peers {
			if p != leader {
				fs = append(fs, p)
			}
		}
		victim = fs[rng.Intn(len(fs))]
	case faultPause:
		victim = c.peers[rng.Intn(len(c.peers))]
	}
	role := "follower"
	if victim == leader {
		role = "leader"
	}
	t.Logf("%s: %s on %s (%s)", time.Now().Format("15:04:05.000"), f.kind, victim.name, role)
	switch f.kind {
	case faultKillLeader, faultKillFollower:
		from := h.now()
		if err := victim.proc.Kill9(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f.hold)
		c.start(victim) // from its data directory alone: it knows the members
		// Measure how long the restarted peer serves an older state: until
		// it has applied what the leader had applied when it came back.
		var target uint64
		c.eventually(60*time.Second, "the leader's applied index", func(ctx context.Context) (bool, string) {
			l := c.leader(ctx)
			if l == nil || l == victim {
				return false, "no other leader"
			}
			lv, err := l.client.Ledger(ctx)
			target = lv.AppliedIndex
			return err == nil, fmt.Sprint(err)
		})
		c.eventually(60*time.Second, victim.name+" catching up", func(ctx context.Context) (bool, string) {
			lv, err := victim.client.Ledger(ctx)
			return err == nil && lv.AppliedIndex >= target, fmt.Sprintf("%d of %d, %v", lv.AppliedIndex, target, err)
		})
		h.mu.Lock()
		h.catchUp[victim.name] = append(h.catchUp[victim.name], [2]int64{from, h.now()})
		h.mu.Unlock()
		t.Logf("%s: %s restarted and caught up to index %d", time.Now().Format("15:04:05.000"), victim.name, target)
	case faultPause:
		if err := victim.proc.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(f.hold)
		if err := victim.proc.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	c.waitFormed()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	now := "?"
	if l := c.leader(ctx); l != nil {
		now = l.name
	}
	t.Logf("%s: healed; leader %s", time.Now().Format("15:04:05.000"), now)
}

// check runs every post-scenario check on the healed federation.
func (c *cluster) check(h *history) {
	t := c.t
	t.Helper()
	ctx := context.Background()

	// 1. Every task ends, and every run stopped for it has reported.
	// Cancelling a task that runs waits for its owner's report, and a
	// lost machine's task runs again: give them time.
	var final []api.TaskView
	c.eventually(3*time.Minute, "every task in a final state", func(ctx context.Context) (bool, string) {
		ts, err := c.peers[0].client.Tasks(ctx, api.TaskQuery{})
		if err != nil {
			return false, err.Error()
		}
		final = ts
		var live []string
		for _, tk := range ts {
			if coarse(tk.State) == stLive {
				live = append(live, tk.ID+":"+tk.State+"@"+tk.Machine)
			}
		}
		if len(live) > 0 {
			return false, fmt.Sprintf("%d live: %v", len(live), live)
		}
		// A task is cancelled (or ends) before the run being stopped
		// for it has reported: its segment stays open (cancelling,
		// preempting) until then. Wait for those reports too, or
		// checkSegments reads a run still winding down (a smoke run once
		// did, 30 ms before the report).
		var stopping []string
		for _, tk := range ts {
			d, err := c.peers[0].client.Task(ctx, tk.ID)
			if err != nil {
				return false, err.Error()
			}
			for _, s := range d.Segments {
				if s.EndMs == 0 {
					stopping = append(stopping, tk.ID+"@"+s.Machine+":"+s.Outcome)
				}
			}
		}
		return len(stopping) == 0, fmt.Sprintf("%d runs still stopping: %v", len(stopping), stopping)
	})

	// 2. None vanished, none appeared from nowhere, every end explained.
	byID := map[string]api.TaskView{}
	for _, tk := range final {
		byID[tk.ID] = tk
	}
	states := map[string]int{}
	for id := range h.submitted {
		if _, ok := byID[id]; !ok {
			t.Errorf("task %s was submitted (its ID returned to client %d) and is not in the ledger", id, h.submitted[id])
		}
	}
	// Every task belongs to one submission, which holds one set of tasks
	// however often it was sent; orphans are those of a submission no
	// attempt of which was answered.
	orphans := h.checkSubmits(t, final)
	for _, tk := range final {
		states[tk.State]++
		switch tk.State {
		case stFailed:
			if tk.Reason == "" {
				t.Errorf("task %s failed without a recorded reason: %+v", tk.ID, tk)
			}
		case stCancelled:
			if !h.cancelled[tk.ID] {
				t.Errorf("task %s is cancelled but no client cancelled it: %+v", tk.ID, tk)
			}
		}
	}
	t.Logf("final tasks: %d (%v); %d from unanswered submits", len(final), states, len(orphans))

	// 3. All peers agree: the same state hash at the same applied index.
	var ledgers []api.LedgerView
	c.eventually(2*time.Minute, "the same ledger on every peer", func(ctx context.Context) (bool, string) {
		ledgers = ledgers[:0]
		var seen []string
		for _, p := range c.peers {
			l, err := p.client.Ledger(ctx)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", p.name, err)
			}
			ledgers = append(ledgers, l)
			seen = append(seen, fmt.Sprintf("%s@%d %.12s", p.name, l.AppliedIndex, l.StateHash))
		}
		for _, l := range ledgers[1:] {
			if l.AppliedIndex != ledgers[0].AppliedIndex || l.StateHash != ledgers[0].StateHash {
				return false, strings.Join(seen, ", ")
			}
		}
		return true, ""
	})
	t.Logf("every peer at index %d, state hash %.16s", ledgers[0].AppliedIndex, ledgers[0].StateHash)

	// 4. Energy: what users were credited equals what owners were, and
	// each organisation's user account equals its tasks' closed segments.
	// PI_i ≤ Lim_i in the final state.
	var userJ, ownerJ float64
	accounts := map[string]api.LedgerAccount{}
	for _, a := range ledgers[0].Orgs {
		userJ += a.UserJ
		ownerJ += a.OwnerSelfJ + a.OwnerOthersJ
		accounts[a.Org] = a
		if a.PIW > a.LimitW {
			t.Errorf("%s: PI %.3f W over its limit %.3f W", a.Org, a.PIW, a.LimitW)
		}
	}
	if mj(userJ) != mj(ownerJ) {
		t.Errorf("energy: users credited %.3f J, owners %.3f J", userJ, ownerJ)
	}
	segUser := map[string]float64{}
	segOwner := map[string]float64{}
	for _, tk := range final {
		d, err := c.peers[0].client.Task(ctx, tk.ID)
		if err != nil {
			t.Fatalf("task %s: %v", tk.ID, err)
		}
		for _, s := range d.Segments {
			segUser[tk.Org] += s.EnergyJ
			segOwner[s.MachineOrg] += s.EnergyJ
		}
		checkSegments(t, d)
	}
	for org, a := range accounts {
		if mj(a.UserJ) != mj(segUser[org]) || mj(a.OwnerSelfJ+a.OwnerOthersJ) != mj(segOwner[org]) {
			t.Errorf("%s: ledger user %.3f J owner %.3f J, segments user %.3f J owner %.3f J",
				org, a.UserJ, a.OwnerSelfJ+a.OwnerOthersJ, segUser[org], segOwner[org])
		}
	}
	t.Logf("energy: %.3f J credited to users = %.3f J to owners", userJ, ownerJ)

	// 5. The client history is linearizable.
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	end := h.now() + 1
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = end
		}
	}
	// A task no answer named was created by an unanswered submit at some
	// unknown time during the run.
	for _, id := range orphans {
		ops = append(ops, porcupine.Operation{ClientId: len(c.peers) * 2, Input: opInput{Kind: opCreate, ID: id}, Call: 0, Output: outOK, Return: end})
	}
	// A final read of each task from the healed federation closes the
	// history; so does, for each submission, the set of tasks the ledger
	// holds for its request ID.
	for _, tk := range final {
		ops = append(ops, porcupine.Operation{ClientId: len(c.peers)*2 + 1, Input: opInput{Kind: opRead, ID: tk.ID}, Call: end + 1, Output: tk.State, Return: end + 2})
	}
	ops = append(ops, h.listingOps(final, len(c.peers)*2+1, end+1)...)
	res, info := porcupine.CheckOperationsVerbose(taskModel, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("linearizable: %d operations over %d tasks", len(ops), len(byID))
	case porcupine.Illegal:
		f, err := os.CreateTemp("", "coopgrid-chaos-history-*.html")
		if err == nil {
			_ = porcupine.Visualize(taskModel, info, f)
			f.Close()
		}
		t.Errorf("the client history is not linearizable (%d operations); visualization: %s", len(ops), f.Name())
		// Name the first task whose own history fails, with its operations.
		for _, part := range taskModel.Partition(ops) {
			if !porcupine.CheckOperations(taskModel, part) {
				sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
				var b strings.Builder
				for _, op := range part {
					fmt.Fprintf(&b, "\n  client %d [%.3f s, %.3f s] %s", op.ClientId, float64(op.Call)/1e9, float64(op.Return)/1e9, taskModel.DescribeOperation(op.Input, op.Output))
				}
				t.Errorf("first non-linearizable task history:%s", b.String())
				break
			}
		}
	default:
		t.Errorf("linearizability check: %v after a minute", res)
	}
	if res == porcupine.Illegal && len(h.catchUp) > 0 {
		// Diagnose: is the history linearizable without the reads a
		// restarted peer served before it caught up?
		var kept []porcupine.Operation
		dropped := 0
		for _, op := range ops {
			in := op.Input.(opInput)
			stale := false
			for _, w := range h.catchUp[in.Peer] {
				stale = stale || (in.Kind == opRead && op.Call >= w[0] && op.Call <= w[1])
			}
			if stale {
				dropped++
				continue
			}
			kept = append(kept, op)
		}
		r2 := porcupine.CheckOperationsTimeout(taskModel, kept, time.Minute)
		t.Logf("diagnosis: without the %d reads served by a restarted peer before it caught up, the history is %v", dropped,
			map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "still NOT linearizable", porcupine.Unknown: "unknown (timeout)"}[r2])
	}
}

// mj rounds joules to millijoules, the ledger's unit.
func mj(j float64) int64 { return int64(math.Round(j * 1000)) }

// checkSegments: a task never holds two runs at overlapping times unless
// the earlier one was ended by the ledger (preempted, lost or cancelled
// while its process may still have been winding down), and at most the
// last run is open.
func checkSegments(t *testing.T, d api.TaskDetail) {
	t.Helper()
	// The ledger's order is the order the runs started in; their stamps
	// come from different peers' clocks (the owner stamps a start, the
	// leader a loss), which the clock faults set apart by up to an hour.
	segs := d.Segments
	for i, s := range segs {
		if s.EndMs == 0 && coarse(d.State) != stLive {
			t.Errorf("task %s is %s with an open run %+v", d.ID, d.State, s)
		}
		if i == 0 {
			continue
		}
		prev := segs[i-1]
		overlap := prev.EndMs == 0 || prev.EndMs > s.StartMs
		if overlap && prev.Outcome != "lost" && prev.Outcome != "preempted" {
			t.Errorf("task %s: run %+v overlaps the next run %+v", d.ID, prev, s)
		}
	}
	if d.State == stDone && (len(segs) == 0 || segs[len(segs)-1].Outcome != "done") {
		t.Errorf("task %s is done but its last run is %+v", d.ID, segs)
	}
}
