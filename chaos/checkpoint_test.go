package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/coopgrid/coopgrid/api"
)

// Checkpoint faults (issue 7: "kill -9 … of the peer holding a
// checkpoint"). A scenario with one of these kinds also runs, beside the
// usual workload, one long checkpointable counting task per organisation,
// checkpointed every second (checkpoint.interval, fastConfig) and
// replicated to a second peer (checkpoint.replication 2). The fault waits
// for a running counter whose latest recorded checkpoint is held by a
// peer other than the one executing it, then kills with SIGKILL either
// that other holder or the executing peer, and restarts it from its data
// directory 1-5 s later.
const (
	faultKillCkHolder   = "kill-9-checkpoint-holder"
	faultKillCkExecutor = "kill-9-checkpoint-executor"
)

// ckScript counts to $TARGET, one step every $STEP seconds. It saves its
// counter and its progress ($WORK MFlop per step) every $EVERY steps and
// at SIGTERM, each file written atomically, the state before the
// progress (docs/CHECKPOINTS.md); at every start it appends the count it
// starts from to $CHECKPOINT_DIR/starts, which travels with the
// checkpoint. result.txt gets those starts and the final count.
const ckScript = `
ck="$CHECKPOINT_DIR/count"
i=0
[ -f "$ck" ] && i=$(cat "$ck")
echo "$i" >> "$CHECKPOINT_DIR/starts"
save() {
	echo "$i" > "$ck.tmp" && mv "$ck.tmp" "$ck"
	echo "{\"done_mflop\":$((i*WORK))}" > "$CHECKPOINT_DIR/p.tmp" && mv "$CHECKPOINT_DIR/p.tmp" "$CHECKPOINT_DIR/coopgrid-progress.json"
}
trap 'save; exit 0' TERM
while [ "$i" -lt "$TARGET" ]; do
	i=$((i+1))
	[ $((i%EVERY)) -eq 0 ] && save
	sleep "$STEP"
done
save
{ echo "starts=$(tr '\n' ' ' < "$CHECKPOINT_DIR/starts")"; echo "count=$i"; } > result.txt
`

const (
	ckTarget   = 250 // steps of 0.1 s: 25 s of counting per task
	ckEvery    = 10
	ckStepWork = 1000 // MFlop per step
)

func ckTask(i int) api.SubmitTask {
	return api.SubmitTask{
		Name:           fmt.Sprintf("counter-%d", i),
		Argv:           []string{"/bin/sh", "-c", ckScript},
		Env:            map[string]string{"TARGET": strconv.Itoa(ckTarget), "EVERY": strconv.Itoa(ckEvery), "STEP": "0.1", "WORK": strconv.Itoa(ckStepWork)},
		SizeMFlop:      ckTarget * ckStepWork,
		WallLimitMs:    600_000,
		Outputs:        []string{"result.txt"},
		Checkpointable: true,
		// Every run lost with its machine counts against max_attempts
		// (issue 14), and this workload's faults kill executors on
		// purpose; the counters must still end done.
		MaxAttempts: 20,
	}
}

// hasCheckpointFaults says the scenario needs the checkpoint workload.
func hasCheckpointFaults(sc scenario) bool {
	for _, k := range sc.kinds {
		if k == faultKillCkHolder || k == faultKillCkExecutor {
			return true
		}
	}
	return false
}

// ckWork is the checkpointable workload: its tasks, what the ledger said
// of them over time (read through each task's own peer, so that the
// readings of one task never go back in time), and when peers were down.
type ckWork struct {
	c     *cluster
	ids   []string
	owner map[string]*peer

	mu    sync.Mutex
	obs   map[string][]ckObs
	downs map[string][]window // by peer name
	kills []string            // what each fault did, for the log
	// victims are the tasks whose executing peer a fault killed, with the
	// number of runs the ledger had recorded for them then.
	victims map[string]int

	stop context.CancelFunc
	done chan struct{}
}

// window is a span a peer was down (to is zero while it still is).
type window struct{ from, to time.Time }

// ckObs is one reading of a task.
type ckObs struct {
	at    time.Time
	state string
	segs  int
	ck    *api.CheckpointView
}

// startCheckpointWork submits one counter per organisation (each through
// its own peer, recorded in the client history like any submit) and
// starts reading them every 250 ms; nil for a scenario without
// checkpoint faults.
func (c *cluster) startCheckpointWork(sc scenario, h *history) *ckWork {
	if !hasCheckpointFaults(sc) {
		return nil
	}
	w := &ckWork{c: c, owner: map[string]*peer{}, obs: map[string][]ckObs{}, downs: map[string][]window{}, victims: map[string]int{}, done: make(chan struct{})}
	client := 2*len(c.peers) + 2 // a client ID no workload client uses
	for i, p := range c.peers {
		// One submission with its request ID, recorded like the
		// workload's (workload_test.go): every attempt in the model, the
		// task named after the request so that check 2 finds its
		// submission; a resend after no answer is a replay.
		key := fmt.Sprintf("ck%d", i)
		ls := &logicalSubmit{client: client, n: 1, call: h.now()}
		h.mu.Lock()
		h.requests[key] = ls
		h.mu.Unlock()
		task := ckTask(i)
		task.Name = key + "-t0"
		var ids []string
		c.eventually(60*time.Second, p.name+" submits a checkpointable counter", func(ctx context.Context) (bool, string) {
			call := h.now()
			res, err := p.client.Submit(ctx, api.SubmitRequest{Job: "counters", RequestID: key, Tasks: []api.SubmitTask{task}})
			ret := h.now()
			h.mu.Lock()
			ls.attempts++
			h.mu.Unlock()
			op := porcupine.Operation{ClientId: client, Input: opInput{Kind: opSubmit, Key: key, N: 1, Peer: p.name}, Call: call, Return: ret}
			switch out := outcome(err); {
			case out == outOK && len(res.TaskIDs) == 1:
				op.Output = res.TaskIDs[0]
				h.add(op, "checkpointable submit")
				ids = res.TaskIDs
				return true, ""
			case out == outAmbiguous:
				op.Output, op.Return = outAmbiguous, -1
				h.add(op, "checkpointable submit unanswered")
			default:
				c.t.Fatalf("%s: submit of a checkpointable counter: %v (%v)", p.name, err, res)
			}
			return false, fmt.Sprint(err)
		})
		id := ids[0]
		h.mu.Lock()
		ls.ids = ids
		h.submitted[id] = client
		h.mu.Unlock()
		h.add(porcupine.Operation{ClientId: client, Input: opInput{Kind: opCreate, ID: id}, Call: ls.call, Output: outOK, Return: h.now()}, "task created")
		w.ids = append(w.ids, id)
		w.owner[id] = p
	}
	c.t.Logf("%s: checkpointable counters %v (%d steps of 0.1 s, checkpointed every second)", stamp(), w.ids, ckTarget)
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	c.t.Cleanup(func() { stop(); <-w.done })
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			for _, id := range w.ids {
				p := w.owner[id]
				if !p.up() {
					continue
				}
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				d, err := p.client.Task(rctx, id)
				cancel()
				if err == nil {
					w.record(id, d, time.Now())
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *ckWork) record(id string, d api.TaskDetail, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.obs[id] = append(w.obs[id], ckObs{at: at, state: d.State, segs: len(d.Segments), ck: d.Checkpoint})
}

// wasUp says p was up for the whole of [from, to].
func (w *ckWork) wasUp(p *peer, from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.downs[p.name] {
		end := d.to
		if end.IsZero() {
			end = to.Add(time.Hour)
		}
		if d.from.Before(to) && end.After(from) {
			return false
		}
	}
	return true
}

// injectCheckpoint applies a checkpoint fault; false for another kind.
func (c *cluster) injectCheckpoint(f fault, rng *rand.Rand, h *history, leader *peer) bool {
	if f.kind != faultKillCkHolder && f.kind != faultKillCkExecutor {
		return false
	}
	t := c.t
	t.Helper()
	w := c.ck
	if w == nil {
		t.Fatalf("%s needs the checkpoint workload", f.kind)
	}
	ids := c.peerIDs()
	byID := map[string]*peer{}
	byName := map[string]*peer{}
	for p, id := range ids {
		byID[id] = p
		byName[p.name] = p
	}
	pick := rng.Int63() // one draw, whatever the polling finds
	var victim, executing *peer
	var task string
	var ck api.CheckpointView
	runs := 0
	c.eventually(90*time.Second, "a running counter with a checkpoint held by a peer other than its executor", func(ctx context.Context) (bool, string) {
		var seen []string
		for k := range w.ids {
			id := w.ids[(int(pick%int64(len(w.ids)))+k)%len(w.ids)]
			p := w.owner[id]
			if !p.up() {
				continue
			}
			d, err := p.client.Task(ctx, id)
			if err != nil {
				seen = append(seen, fmt.Sprintf("%s: %v", id, err))
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s on %s ck %v", id, d.State, d.Machine, d.Checkpoint != nil))
			if d.State != "running" || d.Checkpoint == nil || d.Checkpoint.ProgressGFlop <= 0 {
				continue
			}
			exec := byName[strings.SplitN(d.Machine, "/", 2)[0]]
			var others []*peer
			for _, hid := range d.Checkpoint.Holders {
				if q := byID[hid]; q != nil && q != exec && q.up() {
					others = append(others, q)
				}
			}
			if exec == nil || !exec.up() || len(others) == 0 {
				continue
			}
			executing, task, ck, runs = exec, id, *d.Checkpoint, len(d.Segments)
			victim = exec
			if f.kind == faultKillCkHolder {
				victim = others[int(pick/7)%len(others)]
			}
			return true, ""
		}
		return false, strings.Join(seen, "; ")
	})
	var holders []string
	for _, hid := range ck.Holders {
		if q := byID[hid]; q != nil {
			holders = append(holders, q.name)
		}
	}
	role := "follower"
	if victim == leader {
		role = "leader"
	}
	what := fmt.Sprintf("%s: %s runs on %s with checkpoint %.12s (%.0f GFlop) held by %v: kill -9 of %s (%s)",
		f.kind, task, executing.name, ck.Hash, ck.ProgressGFlop, holders, victim.name, role)
	t.Logf("%s: %s", stamp(), what)
	w.mu.Lock()
	w.kills = append(w.kills, what)
	if victim == executing {
		w.victims[task] = runs
	}
	w.downs[victim.name] = append(w.downs[victim.name], window{from: time.Now()})
	w.mu.Unlock()
	from := h.now()
	if err := victim.proc.Kill9(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(f.hold)
	c.start(victim)
	c.waitCaughtUp(victim, h, from)
	w.mu.Lock()
	d := w.downs[victim.name]
	d[len(d)-1].to = time.Now()
	w.mu.Unlock()
	if f.kind == faultKillCkHolder {
		c.holderKept(victim, ids[victim])
	}
	return true
}

// holderKept checks that a holder killed with SIGKILL and restarted still
// has, in DATA/checkpoints, the archive of every live checkpoint the
// ledger names it a holder of (the store syncs an archive before it is
// reported, and garbage collection at start keeps what the ledger names).
// A checkpoint found missing is read again: only one still recorded (not
// replaced meanwhile by a newer one) counts as lost.
func (c *cluster) holderKept(p *peer, id string) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kept := 0
	for _, task := range c.ck.ids {
		d, err := p.client.Task(ctx, task)
		if err != nil {
			t.Errorf("%s: task %s: %v", p.name, task, err)
			continue
		}
		if d.Checkpoint == nil || coarse(d.State) != stLive || !slices.Contains(d.Checkpoint.Holders, id) {
			continue
		}
		file := filepath.Join(p.data, "checkpoints", d.Checkpoint.Hash+".tar.gz")
		if _, err := os.Stat(file); err == nil {
			kept++
			continue
		}
		again, err := p.client.Task(ctx, task)
		if err == nil && again.Checkpoint != nil && again.Checkpoint.Hash == d.Checkpoint.Hash {
			t.Errorf("%s restarted after kill -9 without the archive of %s's checkpoint %.16s that the ledger says it holds", p.name, task, d.Checkpoint.Hash)
		}
	}
	t.Logf("%s: %s restarted still holds the %d live checkpoint archives the ledger names it a holder of", stamp(), p.name, kept)
}

// check reads the counters' final state and checks, from the ledger's
// task details read during the run, that no counter restarted from zero
// while a replica of its latest checkpoint survived: in the ledger a
// recorded checkpoint is dropped, or replaced by one with less progress,
// only by a start that could not restore it (task_started from_zero). A
// drop is allowed only if every holder of the checkpoint it replaced was
// down at some time between the last reading that showed it and the
// reading that showed it gone. Also: every counter is done with its count
// complete (its result.txt, when its outputs reached the submitter), and
// every counter whose executing peer a fault killed ran again.
func (w *ckWork) check() {
	if w == nil {
		return
	}
	c := w.c
	t := c.t
	t.Helper()
	w.stop()
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := c.peerIDs()
	byID := map[string]*peer{}
	for p, id := range ids {
		byID[id] = p
	}
	restarts, resumed, drops, results := 0, 0, 0, 0
	for _, id := range w.ids {
		d, err := c.peers[0].client.Task(ctx, id)
		if err != nil {
			t.Fatalf("counter %s: %v", id, err)
		}
		w.record(id, d, time.Now())
		if d.State != stDone {
			t.Errorf("counter %s ended %s (%s)", id, d.State, d.Reason)
		}
		w.mu.Lock()
		obs := append([]ckObs(nil), w.obs[id]...)
		w.mu.Unlock()
		var best *api.CheckpointView
		var bestSeen time.Time // the last reading that still showed best
		prevSegs := 0
		for _, o := range obs {
			if o.segs > prevSegs && prevSegs > 0 {
				restarts += o.segs - prevSegs
				if best != nil && o.ck != nil && o.ck.ProgressGFlop >= best.ProgressGFlop {
					resumed += o.segs - prevSegs
				}
			}
			prevSegs = max(prevSegs, o.segs)
			switch {
			case best != nil && (o.ck == nil || o.ck.ProgressGFlop < best.ProgressGFlop):
				drops++
				var up []string
				for _, hid := range best.Holders {
					if p := byID[hid]; p != nil && w.wasUp(p, bestSeen, o.at) {
						up = append(up, p.name)
					}
				}
				now := "none"
				if o.ck != nil {
					now = fmt.Sprintf("%.12s (%.0f GFlop)", o.ck.Hash, o.ck.ProgressGFlop)
				}
				if len(up) > 0 {
					t.Errorf("counter %s restarted from zero between %s and %s: its checkpoint %.12s (%.0f GFlop) became %s although its holders %v were up throughout",
						id, bestSeen.Format("15:04:05.000"), o.at.Format("15:04:05.000"), best.Hash, best.ProgressGFlop, now, up)
				} else {
					t.Logf("counter %s restarted from zero between %s and %s with every holder of its checkpoint %.12s down at some point: allowed",
						id, bestSeen.Format("15:04:05.000"), o.at.Format("15:04:05.000"), best.Hash)
				}
				best, bestSeen = o.ck, o.at
			case o.ck != nil:
				best, bestSeen = o.ck, o.at
			}
		}
		if n, ok := w.victims[id]; ok && len(d.Segments) <= n {
			t.Errorf("counter %s lost its executing peer after %d runs and never ran again (%d runs)", id, n, len(d.Segments))
		}
		b, err := os.ReadFile(filepath.Join(w.owner[id].data, "outputs", id, "result.txt"))
		if err == nil {
			results++
			if !strings.Contains(string(b), fmt.Sprintf("count=%d\n", ckTarget)) {
				t.Errorf("counter %s: result %q, want count=%d", id, b, ckTarget)
			}
			t.Logf("counter %s: %d runs, %d readings; %s", id, len(d.Segments), len(obs), strings.Join(strings.Fields(string(b)), " "))
		}
	}
	sort.Strings(w.kills)
	t.Logf("checkpoints: %d counters, %d restarts seen, %d of them resumed from the latest checkpoint, %d from-zero restarts (none allowed while a holder was up), %d results read; faults: %s",
		len(w.ids), restarts, resumed, drops, results, strings.Join(w.kills, " | "))
}
