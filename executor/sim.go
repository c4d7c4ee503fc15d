package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// SimConfig configures a SimExecutor.
type SimConfig struct {
	Machines []MachineConfig
	// Compression is simulated seconds per real second: with 600, a task of
	// 10 minutes on its machine ends after 1 s. 0 means 1 (real time).
	Compression float64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// SimExecutor "runs" a task for (SizeMFlop − DoneMFlop) / MFLOPS seconds of
// simulated time, compressed by Compression, and charges the machine's
// busy power over the simulated duration (EnergySimulated). It runs no
// process and checks no executable; the spec's names and patterns are
// validated as for a real run.
//
// A checkpointable task with a CheckpointDir keeps its progress there in
// SimCheckpointFile, written when it is stopped or times out and read back
// at start, so that the checkpoint layer packs, ships and restores the
// simulated task exactly like a real one.
type SimExecutor struct {
	cfg SimConfig
	log *slog.Logger
	reg *registry[*simRun]
	q   *resultQueue

	closeOnce sync.Once
}

var _ Executor = (*SimExecutor)(nil)

// SimCheckpointFile is the simulated task's checkpoint, in its
// CheckpointDir: JSON {"task": ID, "done_mflop": N}.
const SimCheckpointFile = "coopgrid-sim-progress.json"

type simCheckpoint struct {
	Task      string `json:"task"`
	DoneMFlop int64  `json:"done_mflop"`
}

type simRun struct {
	id, machine string
	stop        chan struct{}
	stopOnce    sync.Once
	done        chan struct{}
}

// NewSimExecutor checks the machines and the compression factor.
func NewSimExecutor(cfg SimConfig) (*SimExecutor, error) {
	if cfg.Compression == 0 {
		cfg.Compression = 1
	}
	if math.IsNaN(cfg.Compression) || math.IsInf(cfg.Compression, 0) || cfg.Compression < 0 {
		return nil, fmt.Errorf("sim executor: compression %v: want a positive finite factor", cfg.Compression)
	}
	reg, err := newRegistry[*simRun](cfg.Machines)
	if err != nil {
		return nil, fmt.Errorf("sim executor: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &SimExecutor{cfg: cfg, log: log, reg: reg, q: newResultQueue()}, nil
}

// Machines returns the executor's machines, sorted by name.
func (e *SimExecutor) Machines() []MachineConfig { return machineList(e.reg.machines) }

// Results delivers one Result per accepted Start.
func (e *SimExecutor) Results() <-chan Result { return e.q.out }

// Running lists the tasks started and not yet ended.
func (e *SimExecutor) Running() []string { return e.reg.ids() }

// Start begins simulating spec on machine.
func (e *SimExecutor) Start(ctx context.Context, machine string, spec TaskSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start %s: %w", spec.ID, err)
	}
	spec = cloneSpec(spec)
	run := &simRun{id: spec.ID, machine: machine, stop: make(chan struct{}), done: make(chan struct{})}
	m, err := e.reg.reserve(machine, spec.ID, run)
	if err != nil {
		return err
	}
	go func() {
		defer e.reg.runs.Done()
		res := e.simulate(m, run, &spec)
		e.reg.release(run.machine, run.id)
		e.q.push(res)
		close(run.done)
	}()
	return nil
}

// Stop ends a simulated task at once (it checkpoints instantly, so the
// grace period is not needed) and returns when its Result is queued.
func (e *SimExecutor) Stop(ctx context.Context, id string, _ time.Duration) error {
	run, ok := e.reg.get(id)
	if !ok {
		return fmt.Errorf("stop %s: %w", id, ErrUnknownTask)
	}
	run.stopOnce.Do(func() { close(run.stop) })
	select {
	case <-run.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// Close stops every running task and waits for them to end (or for ctx).
// Results is closed once every result has been read.
func (e *SimExecutor) Close(ctx context.Context) error {
	var err error
	e.closeOnce.Do(func() {
		running, _ := e.reg.close()
		ids := make([]string, len(running))
		for i, r := range running {
			ids[i] = r.id
		}
		err = stopAll(ctx, ids, 0, e.Stop)
		go func() {
			e.reg.runs.Wait()
			e.q.finish()
		}()
		waitGroup(ctx, &e.reg.runs)
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("close sim executor: %w", ctx.Err())
		}
	})
	return err
}

// seconds converts simulated seconds to a Duration, saturating instead of
// overflowing for absurd sizes.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * 1e9)
}

func (e *SimExecutor) simulate(m MachineConfig, run *simRun, spec *TaskSpec) Result {
	now := time.Now()
	res := Result{ID: spec.ID, Machine: m.Name, Attempt: 1, ExitCode: -1, EnergySource: EnergySimulated, Start: now, End: now}
	fail := func(te *taskError) Result {
		res.Reason, res.Detail = te.reason, te.detail
		res.DoneMFlop = priorDone(spec)
		e.log.Info("simulated task failed", "task", spec.ID, "reason", te.reason, "detail", te.detail)
		return res
	}
	if te := validateSpec(spec, false); te != nil {
		return fail(te)
	}
	if spec.SizeMFlop <= 0 {
		return fail(failf(ReasonBadSpec, "a simulated task needs a positive size, got %d MFlop", spec.SizeMFlop))
	}
	ckDir := ""
	if spec.Checkpointable {
		ckDir = spec.CheckpointDir
	}
	res.CheckpointDir = ckDir
	done0 := spec.DoneMFlop
	if ckDir != "" {
		d, err := readSimCheckpoint(ckDir, spec)
		switch {
		case err == nil:
			done0 = d
		case !errors.Is(err, os.ErrNotExist):
			// A bad checkpoint is never used: start from what the spec says.
			e.log.Warn("simulated task: ignoring checkpoint", "task", spec.ID, "err", err)
			res.Detail = "checkpoint ignored: " + err.Error()
		}
	}

	if spec.Gate != nil {
		if !awaitGate(spec.Gate, run.stop) {
			return fail(failf(ReasonStopped, "the start was not confirmed: nothing of the task ran"))
		}
		if spec.StartBy != nil && !spec.StartBy().IsZero() && time.Now().After(spec.StartBy()) {
			res.LeaseLapsed = true
			return fail(failf(ReasonStopped, "the gate opened after the start's deadline: nothing of the task ran"))
		}
		res.Start = time.Now()
		res.End = res.Start
	}
	mflops := float64(m.MFLOPS())
	total := seconds(float64(spec.SizeMFlop-done0) / mflops)
	end, reason := total, ReasonOK
	if lim := spec.WallClockLimit; lim > 0 && lim < total {
		end, reason = lim, ReasonTimeout
	}
	realEnd := seconds(end.Seconds() / e.cfg.Compression)

	timer := time.NewTimer(realEnd)
	defer timer.Stop()
	var simElapsed time.Duration
	select {
	case <-timer.C:
		simElapsed = end
	case <-run.stop:
		simElapsed = min(seconds(time.Since(res.Start).Seconds()*e.cfg.Compression), end)
		reason = ReasonStopped
	}
	res.End = time.Now()
	res.EnergyMilliJ = milliJ(m.BusyMilliW(), simElapsed)

	switch reason {
	case ReasonOK:
		res.ExitCode, res.Reason, res.DoneMFlop = 0, ReasonOK, spec.SizeMFlop
		return res
	case ReasonTimeout:
		res.Detail = joinDetail(res.Detail, fmt.Sprintf("simulated wall-clock limit %v reached", spec.WallClockLimit))
	case ReasonStopped:
		res.Detail = joinDetail(res.Detail, "stopped on request")
	}
	res.Reason = reason
	res.DoneMFlop = min(done0+int64(simElapsed.Seconds()*mflops), spec.SizeMFlop)
	if ckDir != "" {
		if err := writeSimCheckpoint(ckDir, spec.ID, res.DoneMFlop); err != nil {
			res.Detail = joinDetail(res.Detail, "checkpoint not written: "+err.Error())
		}
	}
	return res
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func readSimCheckpoint(dir string, spec *TaskSpec) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, SimCheckpointFile))
	if err != nil {
		return 0, err
	}
	var ck simCheckpoint
	if err := json.Unmarshal(b, &ck); err != nil {
		return 0, fmt.Errorf("%s: %w", SimCheckpointFile, err)
	}
	if ck.Task != spec.ID {
		return 0, fmt.Errorf("%s: belongs to task %q", SimCheckpointFile, ck.Task)
	}
	if ck.DoneMFlop < 0 || ck.DoneMFlop > spec.SizeMFlop {
		return 0, fmt.Errorf("%s: progress %d MFlop out of [0, %d]", SimCheckpointFile, ck.DoneMFlop, spec.SizeMFlop)
	}
	return ck.DoneMFlop, nil
}

// writeSimCheckpoint replaces the checkpoint atomically, so a crash never
// leaves half a file.
func writeSimCheckpoint(dir, id string, done int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(simCheckpoint{Task: id, DoneMFlop: done})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".sim-progress-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, SimCheckpointFile))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
