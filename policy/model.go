// Package policy holds the scheduling policies of the federation (OSEP, HOSEP,
// EHOSEP and the EHOSEP best-fit variant) as pure, deterministic functions
// over a read-only view of the federation's state.
//
// The package has no clock, no I/O, no goroutines and no package-level
// mutable state: the Raft leader and the discrete-event simulator build a
// State, call Policy.Schedule, and apply the returned decisions in order.
//
// Units are integers so that sums are exact and every peer, and the fast and
// reference implementations, compare the same values bit for bit:
// computing power in MFLOPS (1 GFLOPS = 1000 MFLOPS), work in MFlop, power in
// milliwatts. The specification is ../shared/spec/POLICY.md; seed 000 is
// Forte's 2018 dissertation (algorithms 3-5, L755-915).
package policy

import "fmt"

// Org is an organisation (the papers' "user"): it owns machines and submits
// tasks. Quota and power quota are derived from the machines it owns.
type Org struct {
	Name string
	// LimitMilliW is Lim_i, the ceiling on PI_i (the power of the machines
	// running its tasks), in milliwatts.
	LimitMilliW int64
}

// Machine runs tasks: one at a time when it is a one-slot machine (the
// papers' model, and the zero Capacity), several when their requests fit
// its Capacity.
type Machine struct {
	ID string
	// Owner is the index of the owning organisation in State.Orgs.
	Owner int
	// MFLOPS is d_m, the computing power.
	MFLOPS int64
	// BusyMilliW is c_m, the power drawn while running a task (the papers'
	// binary power model: 0 while idle).
	BusyMilliW int64
	// Capacity is what the machine offers (see Resources: the zero value is
	// one slot).
	Capacity Resources
	// Attrs are the machine's attributes that requirements test ("os",
	// "arch", "label.NAME"); nil has none.
	Attrs map[string]string
	// Policy is what its owner lets run on it; nil refuses nothing.
	Policy *OwnerPolicy
	// MTBFMs is the machine's stability (MTBF, see MTBF): larger is more
	// stable. Only the placement of a task with a Class reads it.
	MTBFMs int64
	// OwnerLoadPermille is the share of the machine its own users take
	// (0-1000; the ledger's recorded local load): the deadline predictor
	// assumes MFLOPS × (1000 − it) / 1000 (AvailableMFLOPS). EHOSEP's
	// quotas and energy order keep MFLOPS.
	OwnerLoadPermille int64
}

// Task is a unit of independent work waiting for a machine.
type Task struct {
	ID string
	// Org is the index of the owning organisation in State.Orgs.
	Org int
	// SizeMFlop is the work still to do (the whole size for a fresh task,
	// what remains after the last checkpoint for a resumed one).
	SizeMFlop int64
	// Seq orders submissions: smaller was submitted earlier. It breaks ties
	// between tasks of equal size (then ID does).
	Seq uint64
	// Request is what the task needs of a machine (the zero value: one CPU).
	Request Resources
	// Requirements constrain the machine's attributes.
	Requirements []Requirement
	// Executable is the task's argv[0] ("" for a simulated task) and
	// WallLimitMs its own wall-clock limit (0: none), checked against the
	// machine owner's policy.
	Executable  string
	WallLimitMs int64
	// Avoid names machines (by ID) that failed earlier runs of the task
	// (the executor refused or could not start it, or the machine was
	// lost under it): it is not placed there again while another machine
	// matches it (Eligible).
	Avoid []string
	// Class (0: none) and DeadlineMs (a SoftDeadline task's deadline, on
	// State.NowMs's clock): a task with a class is placed by the deadline
	// mapping among the machines EHOSEP lets its organisation use
	// (deadline_place.go); a task without one exactly as before.
	Class      TaskClass
	DeadlineMs int64
	// Gang says the task is a gang's part (running: its gang is placed
	// whole). A gang's preemption (GangFirst) never takes one as victim:
	// stopping it stops its whole gang.
	Gang bool
}

// Running is a task currently executing on a machine.
type Running struct {
	Task Task
	// Machine is the index of the machine in State.Machines.
	Machine int
	// RunSeconds is the time the task has run since it last started on this
	// machine (TempoExec in seed 000 eq. 3.7-3.8).
	RunSeconds float64
	// HasCheckpoint says a checkpoint was recorded during this run;
	// SinceCheckpointSeconds is then the run time since that checkpoint and
	// replaces the fixed checkpoint block in the waste calculation.
	HasCheckpoint          bool
	SinceCheckpointSeconds float64
}

// State is the read-only view a policy decides on. Policies never modify it.
type State struct {
	Orgs     []Org
	Machines []Machine
	// Queued are the waiting tasks, in any order.
	Queued []Task
	// Queue, if not nil, holds the waiting tasks instead of Queued (which
	// must then be empty): kept between passes by the caller, so that a
	// pass does not read, validate or sort the whole queue (see Queue).
	// EHOSEP reads only the heads it serves; the other policies and
	// Pending list its tasks.
	Queue *Queue
	// Gangs are the waiting gangs (GangJob), whose parts are in no queue.
	// Only GangFirst and LiveBackfill read them (WithJobPolicy gives one
	// of those); the other policies leave them waiting.
	Gangs []GangJob
	// Running are the running tasks; a machine appears several times when
	// it runs several tasks, whose requests then fit its capacity together.
	Running []Running
	// Federation optionally carries what is derived from Machines, prepared
	// once by NewFederation (see there). Nil means derive it in every call.
	Federation *Federation
	// CheckpointBlockSeconds is the checkpoint block of seed 000 eq. 3.7 as
	// run time on the machine (5 minutes in the dissertation); 0 means no
	// checkpointing (eq. 3.8).
	CheckpointBlockSeconds float64
	// Held, if not empty (one entry per machine), marks the machines the
	// scheduler must leave alone in this pass: a held machine is neither
	// free nor a preemption victim, but the task running on it still counts
	// in its organisation's allocation and power. The author's iSPD
	// schedulers block a machine for two status-update cycles after every
	// assignment (EHOSEP.java and HOSEP.java, resultadoAtualizar); the
	// simulator's iSPD engine (lab/sim/ispd.go) passes those machines here.
	Held []bool
	// NowMs is the time of the state, read only to place tasks with a
	// Class (a soft-deadline task's predicted finish is NowMs plus its
	// run time).
	NowMs int64
}

// held says machine m is held (see State.Held).
func (s *State) held(m int) bool { return len(s.Held) > 0 && s.Held[m] }

// Kind says what a decision does.
type Kind uint8

const (
	// Allocate places a queued task on a machine with room for it.
	Allocate Kind = iota + 1
	// Preempt stops a task running on a machine (it goes back to its
	// owner's queue, keeping its checkpointed progress) and places a queued
	// task on that machine, in the room the victim leaves.
	Preempt
)

func (k Kind) String() string {
	switch k {
	case Allocate:
		return "allocate"
	case Preempt:
		return "preempt"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Decision is one step of a scheduling pass. Decisions of one pass must be
// applied in order: a later one may depend on an earlier one (a task
// preempted early in the pass can be placed again later in the same pass).
type Decision struct {
	Kind Kind
	// Task is the task placed, Org its owner's index.
	Task string
	Org  int
	// Machine is the index in State.Machines of the machine it is placed on.
	Machine int
	// For Preempt: the task stopped on Machine and its owner's index.
	Victim    string
	VictimOrg int
	// VictimWasteMFlop is the work the victim loses by being stopped
	// (seed 000 eq. 3.7 or 3.8); VictimKeptMFlop is the work it keeps.
	VictimWasteMFlop float64
	VictimKeptMFlop  float64
}

// Policy decides one scheduling pass. Schedule must be deterministic: the
// same State gives the same decisions, in the same order.
type Policy interface {
	Name() string
	Schedule(s *State) ([]Decision, error)
}

// Names lists the policies New knows, in a stable order.
func Names() []string { return []string{"osep", "hosep", "ehosep", "ehosep-bestfit"} }

// New returns the named policy.
func New(name string) (Policy, error) {
	switch name {
	case "osep":
		return OSEP{}, nil
	case "hosep":
		return HOSEP{}, nil
	case "ehosep":
		return EHOSEP{}, nil
	case "ehosep-bestfit":
		return EHOSEP{BestFit: true}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (want one of osep, hosep, ehosep, ehosep-bestfit)", name)
}
