package ledger

// MachineState says whether a machine can be given work.
type MachineState string

const (
	// MachineUp machines appear in the policy view.
	MachineUp MachineState = "up"
	// MachineLost machines were declared lost (by their owner, or by the
	// leader when heartbeats stopped). A heartbeat from the owner brings them
	// back up.
	MachineLost MachineState = "lost"
)

// TaskState is the life-cycle state of a task. A task is in exactly one.
type TaskState string

const (
	// TaskQueued tasks wait for a machine.
	TaskQueued TaskState = "queued"
	// TaskAssigned tasks were allocated to a machine by the policy; the
	// machine's owner has not yet reported the start.
	TaskAssigned TaskState = "assigned"
	// TaskRunning tasks run on their machine; their last segment is open.
	TaskRunning TaskState = "running"
	// TaskDone, TaskFailed and TaskCancelled are terminal.
	TaskDone      TaskState = "done"
	TaskFailed    TaskState = "failed"
	TaskCancelled TaskState = "cancelled"
)

// Terminal says whether no command can move the task out of s any more.
func (s TaskState) Terminal() bool {
	return s == TaskDone || s == TaskFailed || s == TaskCancelled
}

// Placed says whether a task in state s holds a machine (and so counts in
// its organisation's PI).
func (s TaskState) Placed() bool { return s == TaskAssigned || s == TaskRunning }

// EnergySource says where a segment's energy figure comes from.
type EnergySource string

const (
	// EnergyRAPL is measured by hardware counters: Linux powercap RAPL,
	// or a Slurm cluster's energy plugin (docs/SLURM.md, "Energy").
	EnergyRAPL EnergySource = "rapl"
	// EnergyDeclared is the machine's declared busy power times the duration;
	// the ledger itself uses it for segments nobody can measure any more (a
	// lost machine).
	EnergyDeclared EnergySource = "declared"
	// EnergySimulated comes from the simulated executor.
	EnergySimulated EnergySource = "simulated"
)

func (s EnergySource) valid() bool {
	return s == EnergyRAPL || s == EnergyDeclared || s == EnergySimulated
}

// Outcome is the state of one execution segment.
type Outcome string

const (
	// OutcomeRunning: open, the task runs on the segment's machine.
	OutcomeRunning Outcome = "running"
	// OutcomePreempting: open. The policy preempted the task; the machine's
	// owner has been told to stop it and has not yet reported the measured
	// energy (TaskStopped). The task itself is already back in the queue.
	OutcomePreempting Outcome = "preempting"
	// OutcomeCancelling: open, like OutcomePreempting for a cancelled task.
	OutcomeCancelling Outcome = "cancelling"

	// Closed outcomes. Only closed segments are credited to energy accounts.
	OutcomePreempted Outcome = "preempted"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeDone      Outcome = "done"
	OutcomeFailed    Outcome = "failed"
	// OutcomeLost: the machine was declared lost while the segment was open;
	// its energy is the declared estimate.
	OutcomeLost Outcome = "lost"
)

// Open says whether the segment still waits for its energy report.
func (o Outcome) Open() bool {
	return o == OutcomeRunning || o == OutcomePreempting || o == OutcomeCancelling
}

func (o Outcome) valid() bool {
	switch o {
	case OutcomeRunning, OutcomePreempting, OutcomeCancelling,
		OutcomePreempted, OutcomeCancelled, OutcomeDone, OutcomeFailed, OutcomeLost:
		return true
	}
	return false
}

// Energy is an organisation's energy account, in millijoules.
type Energy struct {
	// UserMilliJ is consumed by the organisation's tasks, on any machine
	// (preempted segments included).
	UserMilliJ int64 `json:"user_mj"`
	// OwnerSelfMilliJ is consumed on the organisation's machines by its own
	// tasks; OwnerOthersMilliJ on its machines by other organisations' tasks.
	OwnerSelfMilliJ   int64 `json:"owner_self_mj"`
	OwnerOthersMilliJ int64 `json:"owner_others_mj"`
}

// OwnerMilliJ is everything consumed on the organisation's machines
// (LocalJ_i of seed 000 eq. 4.1, in mJ).
func (e Energy) OwnerMilliJ() int64 { return e.OwnerSelfMilliJ + e.OwnerOthersMilliJ }

// Org is an organisation as stored in the ledger. Quota, power quota, PI and
// the other derived quantities are in OrgInfo.
type Org struct {
	Name string `json:"name"`
	// Peer is the libp2p peer ID of the organisation's peer: the only
	// identity allowed to act for it.
	Peer string `json:"peer"`
	// LimitMilliW is Lim_i.
	LimitMilliW int64 `json:"limit_mw"`
	// RegisteredAt is the log index of the registration; organisations are
	// ordered by it everywhere (policy view, listings, hash).
	RegisteredAt uint64 `json:"registered_at"`
	// Submitted counts the tasks the organisation submitted; task IDs are
	// "<org>-<n>" with n = 1, 2, ...
	Submitted uint64 `json:"submitted"`
	Energy    Energy `json:"energy"`
	// Signing: a correctly signed command of Peer acting for the
	// organisation has applied, so its unsigned commands are refused from
	// then on (sign.go). Last and omitted when false, so that a state from
	// before signatures hashes, and its snapshot reads, as before.
	Signing bool `json:"signing,omitempty"`
}

// Machine is one machine of an organisation.
type Machine struct {
	// ID is "<org>/<name>", unique in the federation.
	ID   string `json:"id"`
	Org  string `json:"org"`
	Name string `json:"name"`
	// MFLOPS is d_m, BusyMilliW is c_m. IdleMilliW is the optional idle draw:
	// reported, never used by the policy or the limit check.
	MFLOPS     int64 `json:"mflops"`
	BusyMilliW int64 `json:"busy_mw"`
	IdleMilliW int64 `json:"idle_mw,omitempty"`
	// Unprotected is the registration's MachineSpec.Unprotected: tasks
	// placed here run with its owner's peer's own user and privileges.
	// Omitted when false, so that older states encode and hash as before.
	Unprotected bool `json:"unprotected,omitempty"`
	// Drained: its owner drained it (DrainMachine): no new work. Omitted
	// when false, so that older states encode and hash as before.
	Drained bool `json:"drained,omitempty"`
	// State is up or lost.
	State MachineState `json:"state"`
	// LastHeartbeatMs is the time of the last heartbeat (or of the
	// registration), by the owner's clock.
	LastHeartbeatMs int64 `json:"last_heartbeat_ms"`
	// Task is the task allocated to the machine (assigned or running), or "".
	Task string `json:"task,omitempty"`
	// ObservedRuns, ObservedMFlop and ObservedMs sum the machine's
	// completed runs of at least ObserveMinRunMs (work done, run time),
	// from which EffectiveMFLOPS corrects the declared speed
	// (plausible.go). Kept only on a federation with Rules; omitted while
	// zero, so that older states encode and hash as before.
	ObservedRuns  int64 `json:"observed_runs,omitempty"`
	ObservedMFlop int64 `json:"observed_mflop,omitempty"`
	ObservedMs    int64 `json:"observed_ms,omitempty"`
	// Also are the other tasks placed on the machine when several share it,
	// after Task in placement order (Tasks). Omitted while empty, so that a
	// one-slot machine encodes and hashes as before.
	Also []string `json:"also,omitempty"`
	// Opportunistic is the registration's MachineSpec.Opportunistic: its
	// owner may reclaim it (ReclaimMachine). Reclaimed: the owner has, and
	// not yet released it: it takes no grid work and counts as down.
	// Omitted while false, so that older states encode and hash as before.
	Opportunistic bool `json:"opportunistic,omitempty" since:"3"`
	Reclaimed     bool `json:"reclaimed,omitempty" since:"3"`
	// OwnerLoadPermille is the last load its owner's peer recorded
	// (MachineLoad, load.go), at OwnerLoadAtMs: the share of the machine
	// its own users take, which the deadline predictor takes off its
	// speed. Omitted while zero, so that older states encode and hash as
	// before.
	OwnerLoadPermille int64 `json:"owner_load_permille,omitempty" since:"3"`
	OwnerLoadAtMs     int64 `json:"owner_load_at_ms,omitempty" since:"3"`
	// The machine's availability history folded (stability.go), kept once
	// the federation tracks stability: SinceMs is when it entered its
	// current availability (up, or down: lost or reclaimed), UpMs and
	// DownMs the time it spent available and not before that, Failures
	// its losses while available and Reclaims its owner's reclaims while
	// available. policy.MTBF over the same history gives the same numbers.
	// Omitted while zero, so that older states encode and hash as before.
	SinceMs  int64 `json:"since_ms,omitempty" since:"3"`
	UpMs     int64 `json:"up_ms,omitempty" since:"3"`
	DownMs   int64 `json:"down_ms,omitempty" since:"3"`
	Failures int64 `json:"failures,omitempty" since:"3"`
	Reclaims int64 `json:"reclaims,omitempty" since:"3"`
	// MachineResources is the registration's (MachineSpec).
	MachineResources
}

// Spec is what a task runs. The ledger validates its shape and size and
// otherwise treats it as opaque; the executor gives it meaning (an empty
// Argv is left to the executor, e.g. a simulated task).
type Spec struct {
	Argv []string          `json:"argv,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	// WallLimitMs bounds one run's wall-clock time; 0 means no limit.
	WallLimitMs int64 `json:"wall_limit_ms,omitempty"`
	// Inputs and Outputs are file names relative to the task's directory.
	Inputs  []string `json:"inputs,omitempty"`
	Outputs []string `json:"outputs,omitempty"`
	// Checkpointable says the task writes its state under $CHECKPOINT_DIR
	// and can resume from it.
	Checkpointable bool `json:"checkpointable,omitempty"`
	// Name is an optional label from the job file, for people; it plays no
	// part in scheduling.
	Name string `json:"name,omitempty"`
	// InputDigests, when set, holds one lowercase hex sha256 per Inputs
	// entry, in the same order: the content the submitting peer stored and
	// serves, which the executing peer fetches and verifies. Optional, so
	// that specs encoded before it existed stay valid.
	InputDigests []string `json:"input_digests,omitempty"`
	// TaskRequest: what the task asks of a machine (resources.go).
	TaskRequest
	// Job, MaxAttempts and Retries (retry.go): the job the task was
	// submitted in, how many failures of machines it tolerates (0: the
	// default, DefaultMaxAttempts) and how many of its own failures are
	// run again. Omitted while unset, so that older specs encode as before.
	Job         string `json:"job,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Retries     int    `json:"retries,omitempty"`
	// Gang makes the task one part of a parallel job whose parts start
	// and stop together (gang.go). Omitted when unset.
	Gang *Gang `json:"gang,omitempty" since:"3"`
	// Class and DeadlineMs (deadline.go; seed 004, issue 20): the task's
	// class, "" (none: placed by the policy alone, as every task before
	// version 3), ClassNice or ClassSoftDeadline, and a soft-deadline
	// task's absolute deadline in ms on the submitting peer's clock.
	Class      string `json:"class,omitempty" since:"3"`
	DeadlineMs int64  `json:"deadline_ms,omitempty" since:"3"`
	// Moldable: a moldable task's alternatives and the one chosen
	// (moldable.go). Omitted when unset.
	Moldable *Moldable `json:"moldable,omitempty" since:"3"`
}

// Segment is one run of a task on one machine.
type Segment struct {
	Machine string `json:"machine"`
	// MachineOrg is the machine's owner, kept so that the owner side of the
	// energy account stays attributable after the machine is removed.
	MachineOrg string `json:"machine_org"`
	StartMs    int64  `json:"start_ms"`
	// EndMs, EnergyMilliJ and Source are set when the segment closes.
	EndMs        int64        `json:"end_ms,omitempty"`
	EnergyMilliJ int64        `json:"energy_mj,omitempty"`
	Source       EnergySource `json:"source,omitempty"`
	Outcome      Outcome      `json:"outcome"`
	// FromMFlop is the task's work already saved when the run started
	// (size − remaining): what the run had left to do is size − FromMFlop.
	// Set on a federation with Rules (the time and progress rules need
	// it); omitted while zero.
	FromMFlop int64 `json:"from_mflop,omitempty"`
}

// CheckpointRef points at a checkpoint archive held by peers.
type CheckpointRef struct {
	// Hash identifies the archive (e.g. sha256 hex); SizeBytes is its size.
	Hash      string `json:"hash"`
	SizeBytes int64  `json:"size_bytes"`
	// AtMs is when it was taken (the reporting command's time).
	AtMs int64 `json:"at_ms"`
	// ProgressMFlop is the task's total work saved in it: a resumed task
	// still has SizeMFlop − ProgressMFlop to do.
	ProgressMFlop int64 `json:"progress_mflop"`
	// Holders are the peer IDs holding a copy.
	Holders []string `json:"holders"`
}

// Task is one task of an organisation.
type Task struct {
	// ID is "<org>-<n>", assigned by the ledger at submit.
	ID  string `json:"id"`
	Org string `json:"org"`
	// SizeMFlop is the whole work; RemainingMFlop what is left after the
	// last checkpoint (0 once done).
	SizeMFlop      int64 `json:"size_mflop"`
	RemainingMFlop int64 `json:"remaining_mflop"`
	Spec           Spec  `json:"spec"`
	// Seq is the federation-wide submit order (policy.Task.Seq).
	Seq         uint64    `json:"seq"`
	SubmittedMs int64     `json:"submitted_ms"`
	State       TaskState `json:"state"`
	// Machine is set while the task is assigned or running.
	Machine string `json:"machine,omitempty"`
	// Attempts counts the runs started (TaskStarted accepted).
	Attempts int `json:"attempts"`
	// ExitCode and Reason are reported with the end of the task.
	ExitCode   int            `json:"exit_code"`
	Reason     string         `json:"reason,omitempty"`
	EndedMs    int64          `json:"ended_ms,omitempty"`
	Segments   []Segment      `json:"segments,omitempty"`
	Checkpoint *CheckpointRef `json:"checkpoint,omitempty"`
	// MachineFailures counts the runs that ended for a failure of their
	// machine (retry.go), Failures the task's own failures run again
	// (Spec.Retries), and Avoid the machines that failed it, the most
	// recent last, at most MaxAvoid. Omitted while zero or empty, so that
	// older states encode and hash as before.
	MachineFailures int      `json:"machine_failures,omitempty"`
	Failures        int      `json:"failures,omitempty"`
	Avoid           []string `json:"avoid,omitempty"`
	// Migrations counts the runs moved off their machines because they
	// would miss the task's deadline there (MigrateTask, migrate.go), and
	// DeadlineNote says what the last such report decided: moved, or
	// kept running since no machine could meet the deadline. Omitted
	// while zero or empty, so that older states encode and hash as before.
	Migrations   int    `json:"migrations,omitempty"`
	DeadlineNote string `json:"deadline_note,omitempty"`
}

func (t *Task) clone() Task {
	c := *t
	c.Spec = t.Spec.clone()
	if t.Segments != nil {
		c.Segments = append([]Segment(nil), t.Segments...)
	}
	if t.Checkpoint != nil {
		ck := t.Checkpoint.clone()
		c.Checkpoint = &ck
	}
	if t.Avoid != nil {
		c.Avoid = append([]string(nil), t.Avoid...)
	}
	return c
}

func (s Spec) clone() Spec {
	c := s
	if s.Argv != nil {
		c.Argv = append([]string(nil), s.Argv...)
	}
	if s.Env != nil {
		c.Env = make(map[string]string, len(s.Env))
		for k, v := range s.Env {
			c.Env[k] = v
		}
	}
	if s.Inputs != nil {
		c.Inputs = append([]string(nil), s.Inputs...)
	}
	if s.Outputs != nil {
		c.Outputs = append([]string(nil), s.Outputs...)
	}
	if s.InputDigests != nil {
		c.InputDigests = append([]string(nil), s.InputDigests...)
	}
	if s.Requirements != nil {
		c.Requirements = append([]Requirement(nil), s.Requirements...)
	}
	if s.Gang != nil {
		g := *s.Gang
		c.Gang = &g
	}
	c.Moldable = s.Moldable.Clone()
	return c
}

func (r CheckpointRef) clone() CheckpointRef {
	c := r
	if r.Holders != nil {
		c.Holders = append([]string(nil), r.Holders...)
	}
	return c
}

// openSegment returns the index of the task's open segment on machine with
// one of the given outcomes (the earliest one), or -1.
func (t *Task) openSegment(machine string, outcomes ...Outcome) int {
	for i := range t.Segments {
		s := &t.Segments[i]
		if s.Machine != machine {
			continue
		}
		for _, o := range outcomes {
			if s.Outcome == o {
				return i
			}
		}
	}
	return -1
}
