package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/executor"
	"github.com/coopgrid/coopgrid/ledger"
)

// TestResumesFromTheRecordedCheckpointThenCollectsIt: a checkpointable
// task whose checkpoint is recorded (packed in this peer's store) is
// queued again after its run is lost; the runner restores the checkpoint
// into $CHECKPOINT_DIR before the next run, which says so in its start
// report and simulates only the work left. Once the task is done, the
// collector deletes the archive and the task's checkpoint directory.
func TestResumesFromTheRecordedCheckpointThenCollectsIt(t *testing.T) {
	const size, progress = 1_000_000, 400_000
	l := startLedger(t, simMachines(1), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := l.propose(ctx, func(c *ledger.Command) {
		c.SubmitTasks = &ledger.SubmitTasks{Tasks: []ledger.TaskSpec{{SizeMFlop: size, Spec: ledger.Spec{Checkpointable: true}}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.TaskIDs[0]
	waitFor(t, 20*time.Second, id+" assigned", func() bool { return l.task(id).State == ledger.TaskAssigned })
	machine := l.task(id).Machine
	if _, err := l.propose(ctx, func(c *ledger.Command) { c.TaskStarted = &ledger.TaskStarted{Task: id, Machine: machine} }); err != nil {
		t.Fatal(err)
	}

	cfg := l.config(l.simExecutor())
	r := newRunner(t, cfg)
	// The run that died checkpointed its progress, as the simulated
	// executor does, and recorded it.
	src := t.TempDir()
	state, _ := json.Marshal(map[string]any{"task": id, "done_mflop": progress})
	if err := os.WriteFile(filepath.Join(src, executor.SimCheckpointFile), state, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := r.ck.pack(ctx, id, src)
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	if _, err := l.propose(ctx, func(c *ledger.Command) {
		c.Checkpoint = &ledger.CheckpointRecorded{Task: id, Machine: machine, Checkpoint: ledger.CheckpointData{
			Hash: a.Hash, SizeBytes: a.Size, ProgressMFlop: progress, Holders: []string{l.host.ID().String()},
		}}
	}); err != nil {
		t.Fatalf("record the checkpoint: %v", err)
	}

	r.Start()
	waitFor(t, 30*time.Second, id+" done", func() bool { return l.task(id).State == ledger.TaskDone })
	tk := l.task(id)
	if len(tk.Segments) != 2 || tk.Segments[0].Outcome != ledger.OutcomeLost || tk.Segments[1].Outcome != ledger.OutcomeDone {
		t.Fatalf("segments %+v", tk.Segments)
	}
	// 100 W over the (size − progress) MFlop left at 10,000 MFLOPS, in mJ.
	if want := int64(100_000 * (size - progress) / 10_000); abs(tk.Segments[1].EnergyMilliJ-want) > 1 {
		t.Fatalf("resumed run booked %d mJ, want %d: it did not start from the checkpoint's %d MFlop", tk.Segments[1].EnergyMilliJ, want, progress)
	}
	waitFor(t, 10*time.Second, "archive and checkpoint directory collected", func() bool {
		_, err := os.Stat(filepath.Join(cfg.TasksDir, id, CheckpointSubdir))
		return len(r.CheckpointStore().List()) == 0 && os.IsNotExist(err)
	})
}
