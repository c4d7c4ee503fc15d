package ledger

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// peerOf gives every test organisation a stable, libp2p-shaped peer ID.
func peerOf(org string) string {
	var b strings.Builder
	b.WriteString("12D3KooW")
	for i := 0; i < len(org); i++ {
		if isAlnum(org[i]) {
			b.WriteByte(org[i])
		} else {
			b.WriteByte('x')
		}
	}
	return b.String()
}

// fed drives a ledger through real encoded commands, one log index each.
type fed struct {
	t   testing.TB
	l   *Ledger
	idx uint64
	// log keeps every entry given to Apply, to replay it elsewhere.
	log [][]byte
}

func newFed(t testing.TB) *fed { return &fed{t: t, l: New()} }

// raw applies data at the next index and checks the invariants.
func (f *fed) raw(data []byte) Result {
	f.t.Helper()
	f.idx++
	f.log = append(f.log, data)
	r := f.l.Apply(f.idx, data)
	if err := f.l.CheckInvariants(); err != nil {
		f.t.Fatalf("invariants after index %d (%s): %v", f.idx, data, err)
	}
	return r
}

// apply encodes c (without the encoder's checks, so that invalid commands
// reach Apply too) and applies it.
func (f *fed) apply(c Command) Result {
	f.t.Helper()
	if c.V == 0 || c.V == CommandVersion {
		// The version the command's fields need (helpers build version-1
		// envelopes; forget_tasks and retention are version 2).
		c.V, _ = RequiredVersion(&c)
	}
	b, err := json.Marshal(c)
	if err != nil {
		f.t.Fatalf("marshal: %v", err)
	}
	return f.raw(b)
}

// must applies c and fails the test unless it was applied.
func (f *fed) must(c Command) Result {
	f.t.Helper()
	r := f.apply(c)
	if !r.Applied() {
		f.t.Fatalf("command %s at %d rejected: %v", r.Kind, r.Index, r.Err)
	}
	return r
}

// act is the envelope of a command by org's own peer at time at.
func act(org string, at int64) Command {
	return Command{V: CommandVersion, Org: org, Peer: peerOf(org), AtMs: at}
}

func mspec(name string, mflops, busy int64) MachineSpec {
	return MachineSpec{Name: name, MFLOPS: mflops, BusyMilliW: busy}
}

func register(org string, lim int64, ms ...MachineSpec) Command {
	c := act(org, 1000)
	c.RegisterOrg = &RegisterOrg{LimitMilliW: lim, Machines: ms}
	return c
}

func submit(org string, at int64, sizes ...int64) Command {
	c := act(org, at)
	c.SubmitTasks = &SubmitTasks{}
	for _, s := range sizes {
		c.SubmitTasks.Tasks = append(c.SubmitTasks.Tasks, TaskSpec{SizeMFlop: s, Spec: Spec{Argv: []string{"./work", "--n", "3"}, Env: map[string]string{"B": "2", "A": "1"}, WallLimitMs: 60_000, Inputs: []string{"in/data.csv"}, Outputs: []string{"out.txt"}, Checkpointable: true}})
	}
	return c
}

func decide(org string, at int64, ds ...Decision) Command {
	c := act(org, at)
	c.Decisions = &Decisions{Decisions: ds}
	return c
}

func alloc(task, machine string) Decision {
	return Decision{Kind: DecideAllocate, Task: task, Machine: machine}
}

func preempt(task, machine, victim string) Decision {
	return Decision{Kind: DecidePreempt, Task: task, Machine: machine, Victim: victim}
}

func started(org, task, machine string, at int64) Command {
	c := act(org, at)
	c.TaskStarted = &TaskStarted{Task: task, Machine: machine}
	return c
}

func stopped(org, task, machine string, at, mj int64, ck *CheckpointData) Command {
	c := act(org, at)
	c.TaskStopped = &TaskStopped{Task: task, Machine: machine, EnergyMilliJ: mj, Source: EnergyRAPL, Checkpoint: ck}
	return c
}

func ended(org, task, machine string, at, mj int64, failed bool) Command {
	c := act(org, at)
	c.TaskEnded = &TaskEnded{Task: task, Machine: machine, Failed: failed, EnergyMilliJ: mj, Source: EnergySimulated}
	if failed {
		c.TaskEnded.ExitCode = 2
		c.TaskEnded.Reason = "exit status 2"
	}
	return c
}

func lost(org, machine string, at int64) Command {
	c := act(org, at)
	c.MachineLost = &MachineLostCmd{Machine: machine}
	return c
}

func ckpt(org, task, machine string, at, progress int64) Command {
	c := act(org, at)
	c.Checkpoint = &CheckpointRecorded{Task: task, Machine: machine, Checkpoint: CheckpointData{Hash: "sha256-ab12", SizeBytes: 4096, ProgressMFlop: progress, Holders: []string{peerOf(org)}}}
	return c
}

// base is a small federation: uni-a owns uni-a/m1 (1000 MFLOPS, 100 W) and
// uni-a/m2 (2000 MFLOPS, 150 W) with a 300 W limit; uni-b owns uni-b/x1 (1500 MFLOPS,
// 120 W) with a 200 W limit. uni-a submitted uni-a-1..3, uni-b uni-b-1..2.
func base(t testing.TB) *fed {
	f := newFed(t)
	f.must(register("uni-a", 300_000, mspec("m1", 1000, 100_000), mspec("m2", 2000, 150_000)))
	f.must(register("uni-b", 200_000, mspec("x1", 1500, 120_000)))
	f.must(submit("uni-a", 2000, 10_000, 20_000, 30_000))
	f.must(submit("uni-b", 2100, 15_000, 5_000))
	return f
}

func snapshotOf(t testing.TB, l *Ledger) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := l.WriteSnapshot(&b); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return b.Bytes()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
