package node

import (
	"bufio"
	"context"
	"fmt"
	"github.com/coopgrid/coopgrid/config"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/policy"
	"github.com/coopgrid/coopgrid/runner"
)

// counterScript counts to $TARGET, one step every $STEP seconds. It saves
// its counter, and its progress ($WORK MFlop per step), every $EVERY steps
// and when it receives SIGTERM, each file written atomically; it reads the
// counter back at start. Its stdout says where it resumed, where it was
// stopped and where it ended.
const counterScript = `
ck="$CHECKPOINT_DIR/count"
i=0
[ -f "$ck" ] && i=$(cat "$ck")
echo "resumed=$i"
save() {
	echo "$i" > "$ck.tmp" && mv "$ck.tmp" "$ck"
	echo "{\"done_mflop\":$((i*WORK))}" > "$CHECKPOINT_DIR/p.tmp" && mv "$CHECKPOINT_DIR/p.tmp" "$CHECKPOINT_DIR/coopgrid-progress.json"
}
trap 'save; echo "stopped=$i"; exit 0' TERM
while [ "$i" -lt "$TARGET" ]; do
	i=$((i+1))
	[ $((i%EVERY)) -eq 0 ] && save
	sleep "$STEP"
done
save
echo "$i" > result.txt
echo "count=$i"
`

const (
	counterTarget = 80
	counterEvery  = 10
	counterWork   = 1000 // MFlop per step
)

func counterTask() api.SubmitTask {
	return api.SubmitTask{
		Name:           "counter",
		Argv:           []string{"/bin/sh", "-c", counterScript},
		Env:            map[string]string{"TARGET": strconv.Itoa(counterTarget), "EVERY": strconv.Itoa(counterEvery), "STEP": "0.04", "WORK": strconv.Itoa(counterWork)},
		SizeMFlop:      counterTarget * counterWork,
		Outputs:        []string{"result.txt"},
		Checkpointable: true,
	}
}

func sleepTask(seconds string, size int64) api.SubmitTask {
	return api.SubmitTask{Argv: []string{"/bin/sh", "-c", "sleep " + seconds}, SizeMFlop: size}
}

// ckConfig makes checkpoints fast to observe: a short grace, frequent
// garbage collection.
func ckConfig(c *config.Config) {
	c.Checkpoint.Grace = 3 * time.Second
	c.Checkpoint.GCInterval = 300 * time.Millisecond
	c.Checkpoint.TransferTimeout = 10 * time.Second
}

// stdoutOf returns the stdout of every attempt of task on tn's machines, in
// attempt order, as key=value pairs (a key seen twice keeps the last).
func stdoutOf(t *testing.T, tn *tnode, task string) map[string]int {
	t.Helper()
	out := map[string]int{}
	paths, _ := filepath.Glob(filepath.Join(tn.dir, config.TasksDir, task, "attempt-*", "stdout"))
	sort.Strings(paths)
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				if n, err := strconv.Atoi(v); err == nil {
					out[k] = n
				}
			}
		}
		f.Close()
	}
	return out
}

// savedCount reads the counter the task last saved on tn's disk (-1: none).
func savedCount(tn *tnode, task string) int {
	b, err := os.ReadFile(filepath.Join(tn.dir, config.TasksDir, task, runner.CheckpointSubdir, "count"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

func peerNode(peers []*tnode, id string) *tnode {
	for _, p := range peers {
		if p.n != nil && p.n.ID().String() == id {
			return p
		}
	}
	return nil
}

func submitOne(t *testing.T, ctx context.Context, tn *tnode, tasks ...api.SubmitTask) []string {
	t.Helper()
	resp, err := tn.n.Submit(ctx, api.SubmitRequest{Tasks: tasks})
	if err != nil {
		t.Fatalf("submit on %s: %v", tn.org, err)
	}
	return resp.TaskIDs
}

// TestPreemptedTaskResumesElsewhere is issue 5's main scenario. ck-sub
// (no machines) runs a counting task on ck-own's machine, the
// least-power one. ck-own then submits work of its own: EHOSEP preempts
// ck-sub's task (ck-sub is in excess, and ck-own's limit fits no other
// machine). The task writes its final checkpoint within the grace, ck-own
// packs it, replicates it to another organisation's peer and records it
// with the stop. The task is placed on ck-far's machine, which waits for
// that report, restores the checkpoint and resumes: the count goes on from
// where it stopped and ends at the target. Every archive is collected once
// the task is done.
func TestPreemptedTaskResumesElsewhere(t *testing.T) {
	peers := federation(t, "process", []string{"ck-sub", "ck-own", "ck-far"}, map[string]string{
		"ck-own": processMachine("y1", 10, 100),
		"ck-far": processMachine("z1", 5, 150),
	}, map[string]func(*config.Config){
		"ck-sub": func(c *config.Config) { ckConfig(c); c.Limit = "system" },
		"ck-own": ckConfig,
		"ck-far": ckConfig,
	})
	sub, own, far := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := submitOne(t, ctx, sub, counterTask())[0]
	waitFor(t, 20*time.Second, id+" running on ck-own", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "ck-own/y1"
	})
	waitFor(t, 20*time.Second, id+" saved 20 steps", func() bool { return savedCount(own, id) >= 20 })
	ownTask := submitOne(t, ctx, own, sleepTask("1", 1000))[0]

	// The stop report records the checkpoint; the task is placed on
	// ck-far's machine.
	var ck ledger.CheckpointRef
	waitFor(t, 20*time.Second, id+" checkpointed and running on ck-far", func() bool {
		tk := sub.task(id)
		if tk.Checkpoint != nil {
			ck = *tk.Checkpoint
		}
		return tk.State == ledger.TaskRunning && tk.Machine == "ck-far/z1"
	})
	if ck.Hash == "" || len(ck.Holders) != 2 || ck.Holders[0] != own.n.ID().String() || ck.Holders[1] == ck.Holders[0] {
		t.Fatalf("checkpoint %+v: want two holders, ck-own first", ck)
	}
	for _, h := range ck.Holders {
		if p := peerNode(peers, h); p == nil || !p.n.runner.CheckpointStore().Has(ck.Hash) {
			t.Fatalf("holder %s does not hold %s", h, ck.Hash)
		}
	}
	if tk := sub.task(id); tk.RemainingMFlop != tk.SizeMFlop-ck.ProgressMFlop || ck.ProgressMFlop == 0 {
		t.Fatalf("remaining %d of %d with a checkpoint of %d MFlop", tk.RemainingMFlop, tk.SizeMFlop, ck.ProgressMFlop)
	}

	sub.waitDone(t, 30*time.Second, id+" done", id)
	tk := sub.task(id)
	if len(tk.Segments) != 2 || tk.Segments[0].Machine != "ck-own/y1" || tk.Segments[0].Outcome != ledger.OutcomePreempted ||
		tk.Segments[1].Machine != "ck-far/z1" || tk.Segments[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", tk.Segments)
	}
	first, second := stdoutOf(t, own, id), stdoutOf(t, far, id)
	stopped, resumed := first["stopped"], second["resumed"]
	t.Logf("stopped at %d on ck-own, checkpoint %d MFlop, resumed at %d on ck-far", stopped, ck.ProgressMFlop, resumed)
	if first["resumed"] != 0 || stopped < 20 || stopped >= counterTarget {
		t.Fatalf("first run on ck-own: %v", first)
	}
	// At most the work since the last checkpoint is lost; with the final
	// checkpoint written at SIGTERM, none.
	if resumed < stopped-counterEvery || resumed > stopped || int64(resumed)*counterWork != ck.ProgressMFlop {
		t.Fatalf("resumed at %d after a stop at %d with a checkpoint of %d MFlop", resumed, stopped, ck.ProgressMFlop)
	}
	if second["count"] != counterTarget {
		t.Fatalf("second run on ck-far: %v", second)
	}
	got, err := os.ReadFile(filepath.Join(sub.dir, config.OutputsDir, id, "result.txt"))
	if err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(counterTarget) {
		t.Fatalf("result %q %v", got, err)
	}

	// Garbage collection: no peer keeps an archive or a checkpoint
	// directory of the finished task.
	waitFor(t, 20*time.Second, ownTask+" done", func() bool { return sub.task(ownTask).State == ledger.TaskDone })
	waitFor(t, 10*time.Second, "archives collected on every peer", func() bool {
		for _, p := range peers {
			if len(p.n.runner.CheckpointStore().List()) != 0 {
				return false
			}
			if _, err := os.Stat(filepath.Join(p.dir, config.TasksDir, id, runner.CheckpointSubdir)); err == nil {
				return false
			}
		}
		return true
	})
}

// TestResumeAfterHolderLossOrCorruption: ck-sub's counting task is
// preempted on ck-own's machine while every other machine is busy, so it
// waits in the queue with its checkpoint recorded (held by ck-own and one
// replica). Then, before any restore:
//   - "holder crashed": ck-own, the first holder, crashes. The task
//     resumes from the checkpoint, fetched from the replica;
//   - "every copy corrupt": every holder's copy is damaged on disk. The
//     restore refuses it, the task starts from zero (never from a damaged
//     state), the ledger drops the checkpoint so that the remaining work
//     is the whole size again, and the damaged archives are collected;
//   - "over the restoring peer's limit": the machines' peers accept no
//     archive over 64 bytes (checkpoint.max_archive_bytes), so the replica
//     lands on ck-sub and the restore is refused as too large: the task
//     starts from zero, as above.
//
// A machine is then freed, on a peer that does not hold the replica, so
// that the restore has to fetch it.
func TestResumeAfterHolderLossOrCorruption(t *testing.T) {
	waitsMostly(t)
	cases := []struct {
		name     string
		crash    bool
		corrupt  bool
		tooLarge bool
	}{
		{name: "holder crashed", crash: true},
		{name: "every copy corrupt", corrupt: true},
		{name: "over the restoring peer's limit", tooLarge: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			waitsMostly(t) // three federations of their own
			p := fmt.Sprintf("h%d-", i)
			sub, own, far, alt := p+"sub", p+"own", p+"far", p+"alt"
			small := ckConfig
			if tc.tooLarge {
				small = func(c *config.Config) { ckConfig(c); c.Checkpoint.MaxArchiveBytes = 64 }
			}
			peers := federation(t, "process", []string{sub, own, far, alt}, map[string]string{
				own: processMachine("y1", 10, 100),
				far: processMachine("z1", 5, 150),
				alt: processMachine("w1", 5, 150),
			}, map[string]func(*config.Config){
				sub: func(c *config.Config) { ckConfig(c); c.Limit = "system" },
				own: ckConfig, far: small, alt: small,
			})
			byOrg := map[string]*tnode{}
			for _, p := range peers {
				byOrg[p.org] = p
			}
			s, o := byOrg[sub], byOrg[own]
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			// EHOSEP serves the smallest task first, on the least-power
			// machine: the counter goes to ck-own's y1, the sleepers to
			// the other two.
			ids := submitOne(t, ctx, s, counterTask(), sleepTask("60", 500_000), sleepTask("60", 500_000))
			id := ids[0]
			waitFor(t, 20*time.Second, "every task running", func() bool {
				for _, x := range ids {
					if s.task(x).State != ledger.TaskRunning {
						return false
					}
				}
				return true
			})
			if m := s.task(id).Machine; m != own+"/y1" {
				t.Fatalf("counter runs on %s, want %s/y1", m, own)
			}
			sleeperOn := map[string]string{} // org → sleeper task on its machine
			for _, x := range ids[1:] {
				org, _, _ := strings.Cut(s.task(x).Machine, "/")
				sleeperOn[org] = x
			}
			waitFor(t, 20*time.Second, id+" saved 20 steps", func() bool { return savedCount(o, id) >= 20 })
			submitOne(t, ctx, o, sleepTask("1", 1000))

			var ck ledger.CheckpointRef
			waitFor(t, 20*time.Second, id+" queued with its checkpoint", func() bool {
				tk := s.task(id)
				if tk.Checkpoint != nil {
					ck = *tk.Checkpoint
				}
				return tk.State == ledger.TaskQueued && tk.Checkpoint != nil
			})
			if len(ck.Holders) != 2 || ck.Holders[0] != o.n.ID().String() {
				t.Fatalf("checkpoint %+v: want ck-own and a replica", ck)
			}
			replica := peerNode(peers, ck.Holders[1])
			if replica == nil || !replica.n.runner.CheckpointStore().Has(ck.Hash) {
				t.Fatalf("replica %s does not hold %s", ck.Holders[1], ck.Hash)
			}
			if tc.tooLarge && (replica != s || ck.SizeBytes <= 64) {
				t.Fatalf("a %d-byte archive replicated to %s, a peer that accepts at most 64 bytes", ck.SizeBytes, replica.org)
			}
			stopped := stdoutOf(t, o, id)["stopped"]

			if tc.corrupt {
				for _, h := range ck.Holders {
					corruptArchive(t, peerNode(peers, h), ck.Hash)
				}
			}
			if tc.crash {
				o.crash()
			}
			// Free a machine whose peer does not hold the replica.
			target := byOrg[far]
			if replica == target {
				target = byOrg[alt]
			}
			if err := s.n.Cancel(ctx, sleeperOn[target.org]); err != nil {
				t.Fatalf("cancel: %v", err)
			}
			mach := target.org + "/" + map[string]string{far: "z1", alt: "w1"}[target.org]
			waitFor(t, 30*time.Second, id+" running on "+mach, func() bool {
				tk := s.task(id)
				return tk.State == ledger.TaskRunning && tk.Machine == mach
			})
			tk := s.task(id)
			fromZero := tc.corrupt || tc.tooLarge
			if fromZero && (tk.Checkpoint != nil || tk.RemainingMFlop != tk.SizeMFlop) {
				t.Fatalf("started from zero, but the ledger keeps checkpoint %+v and %d MFlop remaining of %d", tk.Checkpoint, tk.RemainingMFlop, tk.SizeMFlop)
			}
			if tc.crash && (tk.Checkpoint == nil || tk.Checkpoint.Hash != ck.Hash || tk.RemainingMFlop != tk.SizeMFlop-ck.ProgressMFlop) {
				t.Fatalf("resumed, but the ledger has checkpoint %+v and %d MFlop remaining", tk.Checkpoint, tk.RemainingMFlop)
			}
			s.waitDone(t, 30*time.Second, id+" done", id)
			out := stdoutOf(t, target, id)
			t.Logf("stopped at %d, checkpoint %d MFlop, second run: %v", stopped, ck.ProgressMFlop, out)
			if out["count"] != counterTarget {
				t.Fatalf("second run: %v", out)
			}
			if tc.crash && (out["resumed"] == 0 || int64(out["resumed"])*counterWork != ck.ProgressMFlop || out["resumed"] != stopped) {
				t.Fatalf("resumed at %d after a stop at %d (checkpoint %d MFlop)", out["resumed"], stopped, ck.ProgressMFlop)
			}
			if fromZero {
				if out["resumed"] != 0 {
					t.Fatalf("resumed at %d from a refused checkpoint", out["resumed"])
				}
				// The refused bytes were never kept by the restoring
				// peer, and the holders' copies are collected.
				waitFor(t, 10*time.Second, "refused archives collected", func() bool {
					for _, p := range peers {
						if p.n != nil && p.n.runner.CheckpointStore().Has(ck.Hash) {
							return false
						}
					}
					return true
				})
			}
		})
	}
}

// corruptArchive flips a byte in the middle of tn's stored copy of hash.
func corruptArchive(t *testing.T, tn *tnode, hash string) {
	t.Helper()
	p, err := tn.n.runner.CheckpointStore().Path(hash)
	if err != nil {
		t.Fatalf("%s: %v", tn.org, err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// blockScript works for $TOTAL_MS milliseconds of its own clock at $D
// MFLOPS, and checkpoints in blocks: each time a whole block of $BLOCK_MS
// completes it records the work of the completed blocks. It writes no final
// checkpoint at SIGTERM, so a stop loses the unfinished block, which is the
// simulator's model (seed 000 eq. 3.7). When stopped it prints the time it
// ran by its own clock at its last look at the clock, the one its saved
// blocks were counted from: the trap only raises a flag, read where the
// clock and the saved blocks agree, so that the run time printed always
// holds exactly the blocks saved (a stop between reading the clock and
// saving a block would otherwise print a later block than the one kept).
// A clock read the trap interrupted is skipped.
const blockScript = `
pf="$CHECKPOINT_DIR/coopgrid-progress.json"
base=0
[ -f "$pf" ] && base=$(tr -cd 0-9 < "$pf")
off=$((base * 1000 / D))
t0=$(date +%s%N)
saved=$((off / BLOCK_MS))
el=$off
stop=
trap 'stop=1' TERM
while [ "$el" -lt "$TOTAL_MS" ]; do
	sleep 0.02
	if [ -n "$stop" ]; then
		echo "ran_ms=$((el - off))"
		exit 0
	fi
	now=$(date +%s%N)
	# The trap interrupts a command substitution, which then reads empty:
	# keep the last good reading.
	case "$now" in ''|*[!0-9]*) continue ;; esac
	el=$(( off + (now - t0) / 1000000 ))
	blk=$((el / BLOCK_MS))
	if [ "$blk" -gt "$saved" ]; then
		saved=$blk
		echo "{\"done_mflop\":$((blk * BLOCK_MS * D / 1000))}" > "$pf.tmp" && mv "$pf.tmp" "$pf"
	fi
done
echo finished > result.txt
`

// TestWasteAgreesWithSimulator: for one preemption, the work the real
// federation loses (the run's duration × d minus the progress the ledger
// kept) equals what policy.Waste says and what the simulator books, for
// the same machine power, run time and checkpoint block.
//
// The task checkpoints in blocks of B = 2 s by its own clock and writes no
// final checkpoint, as the simulator assumes, and it is preempted after it
// saved its first block (the preemption is aimed at the middle of the
// second, but nothing below depends on where it lands). The run time the
// models are given is the task's own clock at its last saved block count
// (blockScript): the ledger keeps exactly the blocks that clock completed,
// and the three figures agree to 1 MFlop of rounding however long the
// preemption took. The ledger's segment, from the start report to the stop
// report, holds the task's run (it starts before the task's start gate
// opens and ends after the task exited) and also spans the stop's grace,
// packing and replication, during which the task no longer computes: at
// that run time the models may count blocks the task had no time to save,
// never fewer, so the real loss exceeds theirs by whole blocks (zero on a
// quiet machine). A task that writes a final checkpoint at SIGTERM
// (TestPreemptedTaskResumesElsewhere) loses nothing, which the block model
// does not see.
func TestWasteAgreesWithSimulator(t *testing.T) {
	const (
		blockMs = 2000
		gflops  = 1
		d       = gflops * 1000 // MFLOPS
		totalMs = 20_000
		size    = totalMs * d / 1000 // MFlop
	)
	edit := func(c *config.Config) {
		ckConfig(c)
		c.Consensus.CheckpointBlock = blockMs * time.Millisecond
	}
	peers := federation(t, "process", []string{"w-sub", "w-own"}, map[string]string{
		"w-own": processMachine("y1", gflops, 100),
	}, map[string]func(*config.Config){
		"w-sub": func(c *config.Config) { edit(c); c.Limit = "system" },
		"w-own": edit,
	})
	sub, own := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := submitOne(t, ctx, sub, api.SubmitTask{
		Argv:           []string{"/bin/sh", "-c", blockScript},
		Env:            map[string]string{"D": strconv.Itoa(d), "BLOCK_MS": strconv.Itoa(blockMs), "TOTAL_MS": strconv.Itoa(totalMs)},
		SizeMFlop:      size,
		Outputs:        []string{"result.txt"},
		Checkpointable: true,
	})[0]
	progressFile := filepath.Join(own.dir, config.TasksDir, id, runner.CheckpointSubdir, "coopgrid-progress.json")
	waitFor(t, 20*time.Second, id+" completed its first block", func() bool {
		_, err := os.Stat(progressFile)
		return err == nil
	})
	time.Sleep(blockMs / 2 * time.Millisecond)
	submitOne(t, ctx, own, sleepTask("0.5", 500))
	waitFor(t, 20*time.Second, id+" stop reported", func() bool {
		tk := sub.task(id)
		return len(tk.Segments) > 0 && tk.Segments[0].Outcome == ledger.OutcomePreempted
	})
	tk := sub.task(id)
	if err := sub.n.Cancel(ctx, id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	seg := tk.Segments[0]
	if tk.Checkpoint == nil {
		t.Fatalf("no checkpoint recorded: %+v", tk)
	}
	const blockMFlop = blockMs * d / 1000
	kept := tk.Checkpoint.ProgressMFlop
	runLedger := float64(seg.EndMs-seg.StartMs) / 1000
	ranMs := stdoutOf(t, own, id)["ran_ms"]
	runTask := float64(ranMs) / 1000
	t.Logf("run %.3f s by the ledger's segment, %.3f s by the task's clock; kept %d MFlop", runLedger, runTask, kept)
	if kept < blockMFlop || kept%blockMFlop != 0 || tk.RemainingMFlop != size-kept {
		t.Fatalf("kept %d MFlop, remaining %d: want the whole blocks (%d MFlop each) saved before the preemption, at least the first", kept, tk.RemainingMFlop, blockMFlop)
	}
	if saved := int64(ranMs) / blockMs * blockMFlop; saved != kept {
		t.Fatalf("the task's clock (%d ms) completed %d MFlop of blocks, the ledger kept %d", ranMs, saved, kept)
	}
	if seg.EndMs-seg.StartMs < int64(ranMs) {
		t.Fatalf("the ledger's segment (%d ms) is shorter than the run it holds (%d ms by the task's clock)", seg.EndMs-seg.StartMs, ranMs)
	}

	block := float64(blockMs) / 1000
	for _, run := range []struct {
		what  string
		s     float64
		exact bool // the models see the blocks the task saved
	}{{"task clock", runTask, true}, {"ledger segment", runLedger, false}} {
		real := run.s*d - float64(kept) // what the federation lost
		model := policy.Waste(policy.Running{RunSeconds: run.s}, d, block)
		simWaste := simulatedWaste(t, run.s, d, block, size)
		t.Logf("%s: real %.1f MFlop, policy.Waste %.1f, simulator %.1f", run.what, real, model, simWaste)
		if real <= 0 || math.Abs(simWaste-model) > 1 {
			t.Fatalf("%s: real waste %.3f MFlop, policy.Waste %.3f, simulator %.3f: the models must agree to 1 MFlop", run.what, real, model, simWaste)
		}
		// What the models count as saved beyond what the task saved:
		// whole blocks the stop's latency spanned.
		extra := real - model
		blocks := math.Round(extra / blockMFlop)
		if math.Abs(extra-blocks*blockMFlop) > 1 || blocks < 0 || (run.exact && blocks != 0) {
			t.Fatalf("%s: real waste %.3f MFlop, policy.Waste %.3f: want them equal to 1 MFlop%s", run.what, real, model,
				map[bool]string{true: "", false: " or the real one more by whole blocks"}[run.exact])
		}
	}
}

// simulatedWaste runs the simulator on the same situation: an organisation
// has a task of size MFlop running from time 0 on own's machine (d
// MFLOPS), whose owner submits a task at time run, which preempts it
// under EHOSEP with checkpoint blocks of block seconds. It returns the work
// the simulator says the preempted task lost.
//
// The simulator wants every organisation to own a machine: sub gets one of
// 1 MFLOPS and 1 kW, which keeps it in excess (its quota is tiny), is not
// where EHOSEP places its task first (it draws more than own's), and does
// not fit own's limit, so own's task preempts sub's as in the federation.
func simulatedWaste(t *testing.T, run float64, d int64, block float64, size int64) float64 {
	t.Helper()
	inst := &scenario.Instance{
		Name: "waste",
		Orgs: []policy.Org{{Name: "sub", LimitMilliW: ledger.MaxLimitMilliW}, {Name: "own", LimitMilliW: 100_000}},
		Machines: []policy.Machine{
			{ID: "own/y1", Owner: 1, MFLOPS: d, BusyMilliW: 100_000},
			{ID: "sub/s1", Owner: 0, MFLOPS: 1, BusyMilliW: 1_000_000},
		},
		IdleMilliW: []int64{0, 0},
		Tasks: []scenario.TaskSpec{
			{ID: "sub-1", Org: 0, SizeMFlop: size, SubmitSeconds: 0},
			{ID: "own-1", Org: 1, SizeMFlop: 500, SubmitSeconds: run},
		},
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(context.Background(), inst, pol, sim.Config{TickSeconds: sim.DefaultTickSeconds, CheckpointBlockSeconds: block})
	if err != nil {
		t.Fatalf("simulate: %v", err)
	}
	for _, tr := range res.Tasks {
		if tr.ID == "sub-1" {
			if tr.Preemptions != 1 {
				t.Fatalf("simulated task: %+v", tr)
			}
			return tr.WastedMFlop
		}
	}
	t.Fatal("simulated task missing")
	return 0
}

// TestPeriodicCheckpointsSurviveACrash: with checkpoint.interval set, the
// peer running a checkpointable task records its checkpoints while it runs
// (the policy then counts the waste from the last one), and when that
// peer crashes, so that no final checkpoint is written and the first
// holder of every archive is gone, the task resumes elsewhere from the
// last recorded checkpoint, fetched from a replica.
func TestPeriodicCheckpointsSurviveACrash(t *testing.T) {
	waitsMostly(t)
	edit := func(c *config.Config) {
		ckConfig(c)
		c.Checkpoint.Interval = 300 * time.Millisecond
	}
	peers := federation(t, "process", []string{"pc-sub", "pc-own", "pc-far"}, map[string]string{
		"pc-own": processMachine("y1", 10, 100),
		"pc-far": processMachine("z1", 5, 150),
	}, map[string]func(*config.Config){
		"pc-sub": func(c *config.Config) { edit(c); c.Limit = "system" },
		"pc-own": edit,
		"pc-far": edit,
	})
	sub, own, far := peers[0], peers[1], peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := submitOne(t, ctx, sub, counterTask())[0]
	waitFor(t, 20*time.Second, id+" checkpointed while running on pc-own", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "pc-own/y1" && tk.Checkpoint != nil &&
			tk.Checkpoint.ProgressMFlop >= 20*counterWork && tk.Checkpoint.AtMs >= tk.Segments[0].StartMs
	})
	// The policy sees the checkpoint of the running task.
	var hasCk bool
	sub.n.cons.View(func(l *ledger.Ledger) {
		st, _ := l.PolicyView(time.Now().UnixMilli(), 300)
		for _, r := range st.Running {
			hasCk = hasCk || (r.Task.ID == id && r.HasCheckpoint)
		}
	})
	if !hasCk {
		t.Fatal("the policy view shows no checkpoint for the running task")
	}
	ownID := own.n.ID().String()
	own.crash()
	onDisk := savedCount(own, id)

	waitFor(t, 30*time.Second, id+" running on pc-far", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "pc-far/z1"
	})
	ck := sub.task(id).Checkpoint
	if ck == nil || ck.Holders[0] != ownID || len(ck.Holders) != 2 {
		t.Fatalf("checkpoint %+v: want the crashed peer first and a replica", ck)
	}
	sub.waitDone(t, 30*time.Second, id+" done", id)
	out := stdoutOf(t, far, id)
	t.Logf("count on the crashed peer's disk %d, last recorded checkpoint %d MFlop, second run %v", onDisk, ck.ProgressMFlop, out)
	if out["resumed"] == 0 || int64(out["resumed"])*counterWork != ck.ProgressMFlop || out["resumed"] > onDisk || out["count"] != counterTarget {
		t.Fatalf("second run %v after a crash at count %d with a checkpoint of %d MFlop", out, onDisk, ck.ProgressMFlop)
	}
	if segs := sub.task(id).Segments; len(segs) != 2 || segs[0].Outcome != ledger.OutcomeLost || segs[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", segs)
	}
}

// TestSimulatedTaskResumesFromCheckpoint: the same path with the simulated
// executor, which writes its exact progress into $CHECKPOINT_DIR when it
// is stopped. The preempted task resumes on another organisation's
// machine and simulates only the work left: the energy of its second
// segment is that machine's busy power over (size − checkpointed
// progress) / speed.
func TestSimulatedTaskResumesFromCheckpoint(t *testing.T) {
	waitsMostly(t)
	peers := federation(t, "sim", []string{"s-sub", "s-own", "s-far"}, map[string]string{
		"s-own": simMachine("y1", 100, 100),
		"s-far": simMachine("z1", 50, 150),
	}, map[string]func(*config.Config){
		"s-sub": func(c *config.Config) { ckConfig(c); c.Limit = "system" },
		"s-own": ckConfig,
		"s-far": ckConfig,
	})
	sub, own := peers[0], peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 100 s simulated on s-own (2.5 s real at compression 40), preempted
	// after about 1 s.
	const size = 10_000_000
	id := submitOne(t, ctx, sub, api.SubmitTask{SizeMFlop: size, Checkpointable: true})[0]
	waitFor(t, 20*time.Second, id+" running on s-own", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "s-own/y1"
	})
	time.Sleep(time.Second)
	submitOne(t, ctx, own, api.SubmitTask{SizeMFlop: 100_000})
	waitFor(t, 20*time.Second, id+" running on s-far", func() bool {
		tk := sub.task(id)
		return tk.State == ledger.TaskRunning && tk.Machine == "s-far/z1"
	})
	ck := sub.task(id).Checkpoint
	if ck == nil || ck.ProgressMFlop <= 0 || ck.ProgressMFlop >= size {
		t.Fatalf("checkpoint %+v", ck)
	}
	waitFor(t, 30*time.Second, id+" done", func() bool { return sub.task(id).State == ledger.TaskDone })
	segs := sub.task(id).Segments
	if len(segs) != 2 || segs[0].Outcome != ledger.OutcomePreempted || segs[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", segs)
	}
	// 150 W × (size − progress) / 50,000 MFLOPS, in mJ (the executor
	// rounds the simulated duration to the microsecond).
	want := 150_000 * float64(size-ck.ProgressMFlop) / 50_000
	if got := float64(segs[1].EnergyMilliJ); math.Abs(got-want) > 1 {
		t.Fatalf("second segment %v mJ, want %v mJ: the resumed run did not start from the checkpoint's %d MFlop", got, want, ck.ProgressMFlop)
	}
	t.Logf("checkpoint %d MFlop of %d; second segment %d mJ", ck.ProgressMFlop, size, segs[1].EnergyMilliJ)
}
