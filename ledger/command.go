package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CommandVersion is the version of every command made only of the kinds and
// fields that existed when versions were introduced: what almost every
// command carries. A kind or field added since carries a higher version
// (version.go); MaxCommandVersion is the highest this ledger applies. A peer
// running an older ledger rejects newer commands with CodeBadVersion instead
// of misreading them, and consensus stops applying there (NewerVersion).
const CommandVersion = 1

// Bounds on what a command may carry. They keep every sum inside int64 and
// every log entry small enough for Raft.
const (
	MaxCommandBytes        = 32 << 20
	MaxNameLen             = 64
	MaxPeerIDLen           = 128
	MaxTaskIDLen           = MaxNameLen + 21
	MaxMachinesPerCommand  = 4096
	MaxTasksPerCommand     = 10_000
	MaxDecisionsPerCommand = 100_000
	// MaxMFLOPS is 10^9 GFLOPS per machine, MaxMachineMilliW 100 kW.
	MaxMFLOPS        = 1_000_000_000_000
	MaxMachineMilliW = 100_000_000
	// MaxLimitMilliW is 10^12 W, far above any federation ("whole system").
	MaxLimitMilliW = 1_000_000_000_000_000
	MaxSizeMFlop   = 1 << 53
	// MaxSegmentMilliJ is 10 GJ per reported segment.
	MaxSegmentMilliJ = 10_000_000_000_000
	// MaxTimeMs is about the year 3084.
	MaxTimeMs         = 1 << 45
	MaxArgv           = 256
	MaxArgBytes       = 4096
	MaxEnv            = 256
	MaxEnvKeyLen      = 128
	MaxFiles          = 256
	MaxFileNameLen    = 255
	MaxReasonBytes    = 1024
	MaxHolders        = 16
	MaxCheckpointHash = 128
	MaxCheckpointSize = 1 << 50
	// MaxTaskNameBytes bounds Spec.Name.
	MaxTaskNameBytes = 256
)

// Kind names a command type.
type Kind string

const (
	KindRegisterOrg   Kind = "register_org"
	KindAddMachine    Kind = "add_machine"
	KindRemoveMachine Kind = "remove_machine"
	KindSetLimit      Kind = "set_limit"
	KindSubmitTasks   Kind = "submit_tasks"
	KindCancelTask    Kind = "cancel_task"
	KindDecisions     Kind = "decisions"
	KindTaskStarted   Kind = "task_started"
	KindTaskStopped   Kind = "task_stopped"
	KindTaskEnded     Kind = "task_ended"
	KindHeartbeat     Kind = "heartbeat"
	KindMachineLost   Kind = "machine_lost"
	KindCheckpoint    Kind = "checkpoint"
)

// Command is one log entry. Exactly one body pointer is set; each body
// pointer field is one command kind (body.go). The envelope
// names who acts: Org is the acting organisation and Peer the libp2p peer ID
// that authored the command; Apply checks that Peer is the peer registered
// for Org and, when the command is signed (Sig), that Peer signed it. AtMs
// is the proposer's clock, the only notion of time Apply uses.
//
// The encoding is JSON of this struct: fields come out in declaration order
// and map keys sorted, so the same Command always encodes to the same bytes.
type Command struct {
	V    int    `json:"v"`
	Org  string `json:"org"`
	Peer string `json:"peer"`
	AtMs int64  `json:"at_ms"`

	RegisterOrg   *RegisterOrg        `json:"register_org,omitempty"`
	AddMachine    *AddMachine         `json:"add_machine,omitempty"`
	RemoveMachine *RemoveMachine      `json:"remove_machine,omitempty"`
	SetLimit      *SetLimit           `json:"set_limit,omitempty"`
	SubmitTasks   *SubmitTasks        `json:"submit_tasks,omitempty"`
	CancelTask    *CancelTask         `json:"cancel_task,omitempty"`
	Decisions     *Decisions          `json:"decisions,omitempty"`
	TaskStarted   *TaskStarted        `json:"task_started,omitempty"`
	TaskStopped   *TaskStopped        `json:"task_stopped,omitempty"`
	TaskEnded     *TaskEnded          `json:"task_ended,omitempty"`
	Heartbeat     *Heartbeat          `json:"heartbeat,omitempty"`
	MachineLost   *MachineLostCmd     `json:"machine_lost,omitempty"`
	Checkpoint    *CheckpointRecorded `json:"checkpoint,omitempty"`
	// Membership is a federation decision about who belongs to it
	// (membership.go); omitted when unset, so that every other command
	// encodes as before it existed.
	Membership *Membership `json:"membership,omitempty"`
	// Reports is a batch of task_started/task_stopped/task_ended/checkpoint
	// reports (batch.go). Last, and omitted when unset, so that every other
	// command encodes as before it existed.
	Reports *Reports `json:"reports,omitempty"`
	// DrainMachine (drain.go) is omitted when unset, so that every other
	// command encodes as before it existed.
	DrainMachine *DrainMachine `json:"drain_machine,omitempty"`
	// Schedule is a scheduling trigger every peer computes itself
	// (schedule.go). Omitted when unset, so that every other command
	// encodes as before it existed.
	Schedule *Schedule `json:"schedule,omitempty"`
	// RetryTask re-queues a failed or cancelled task (retry.go). Omitted
	// when unset, so that every other command encodes as before it existed.
	RetryTask *RetryTask `json:"retry_task,omitempty"`
	// ForgetTasks removes terminal tasks past the federation's retention
	// (retention.go). Omitted when unset.
	ForgetTasks *ForgetTasks `json:"forget_tasks,omitempty" since:"2"`
	// JobPolicy is an organisation's vote for the federation's job policy
	// (jobpolicy.go). Omitted when unset.
	JobPolicy *JobPolicyVote `json:"job_policy,omitempty" since:"2"`
	// ReclaimMachine is an owner reclaiming or releasing an opportunistic
	// machine (stability.go). Omitted when unset.
	ReclaimMachine *ReclaimMachine `json:"reclaim_machine,omitempty" since:"3"`
	// RetentionVote is an organisation's vote for the federation's
	// retention rule (retentionvote.go). Omitted when unset.
	RetentionVote *RetentionVote `json:"retention_vote,omitempty" since:"3"`
	// MigrateTask is the executing peer moving a run that will miss its
	// task's deadline (migrate.go). Omitted when unset.
	MigrateTask *MigrateTask `json:"migrate_task,omitempty" since:"3"`
	// MachineLoad is an owner's peer recording its machine's local load
	// (load.go). Omitted when unset.
	MachineLoad *MachineLoad `json:"machine_load,omitempty" since:"3"`
	// Sig is Peer's Ed25519 signature over SignaturePrefix and the
	// command's encoding without Sig (sign.go; EncodeSigned). It covers
	// the whole command, every item of a reports batch included. Last and
	// omitted when empty, so that an unsigned command encodes as before
	// signatures existed and an old log replays to the same hash.
	Sig []byte `json:"sig,omitempty"`
}

// RegisterOrg registers the acting organisation, bound to the acting peer,
// with its power limit and its machines. Machine IDs become "<org>/<name>".
//
// Rules, optional, declare the organisation's executors (live or
// simulated) and, on the federation's first registration, fix the
// federation's rules (plausible.go). A later registration whose executors
// differ from the federation's is refused (CodeExecutorMode); its other
// rule fields are ignored. Omitted when unset, so that registrations
// encoded before it existed stay valid and encode to the same bytes.
type RegisterOrg struct {
	LimitMilliW int64         `json:"limit_mw"`
	Machines    []MachineSpec `json:"machines"`
	Rules       *Rules        `json:"rules,omitempty"`
}

func (*RegisterOrg) Kind() Kind { return KindRegisterOrg }

// MachineSpec declares a machine.
type MachineSpec struct {
	Name       string `json:"name"`
	MFLOPS     int64  `json:"mflops"`
	BusyMilliW int64  `json:"busy_mw"`
	IdleMilliW int64  `json:"idle_mw,omitempty"`
	// Unprotected: its owner opted in (unsafe_run_as_peer_user) to tasks
	// running with the owner's peer's own user and privileges, neither as
	// a dedicated user nor in a sandbox (docs/SECURITY.md, "Tasks").
	// Declared so that every member sees it, not only the owner's log.
	// Omitted when false: older entries encode and replay as before.
	Unprotected bool `json:"unprotected,omitempty"`
	// MachineResources: capacity, attributes and the owner's policy
	// (resources.go); unset, the machine is one slot open to every task.
	MachineResources
	// Opportunistic: a desktop or lab machine whose owner may take it back
	// at any time (ReclaimMachine, stability.go). Omitted when false.
	Opportunistic bool `json:"opportunistic,omitempty" since:"3"`
}

// AddMachine adds a machine to the acting organisation.
type AddMachine struct {
	Machine MachineSpec `json:"machine"`
}

func (*AddMachine) Kind() Kind { return KindAddMachine }

// RemoveMachine removes one of the acting organisation's machines. It must
// hold no task and no unreported run (CodeMachineBusy); declare it lost
// first to give its tasks back to the queue.
type RemoveMachine struct {
	Machine string `json:"machine"`
}

func (*RemoveMachine) Kind() Kind { return KindRemoveMachine }

// SetLimit sets the acting organisation's Lim_i. A limit below the current
// PI_i is rejected (CodeLimitExceeded): PI_i ≤ Lim_i is an invariant, and
// the ledger never stops tasks on its own.
type SetLimit struct {
	LimitMilliW int64 `json:"limit_mw"`
}

func (*SetLimit) Kind() Kind { return KindSetLimit }

// SubmitTasks queues a batch of tasks for the acting organisation. Their IDs
// are returned in Result.TaskIDs, in order.
//
// RequestID is the client's optional idempotency key, scoped to the acting
// organisation: a submit whose organisation already applied one with the
// same RequestID and the same tasks is answered with the original task IDs
// (Result.Replayed) and changes nothing; with different tasks it is refused
// (CodeExists). The ledger remembers the last MaxRequestsPerOrg keys of each
// organisation (requests.go). Optional, so that submits encoded before it
// existed stay valid and encode to the same bytes.
type SubmitTasks struct {
	RequestID string     `json:"request_id,omitempty"`
	Tasks     []TaskSpec `json:"tasks"`
}

func (*SubmitTasks) Kind() Kind { return KindSubmitTasks }

// TaskSpec is one task of a submission.
type TaskSpec struct {
	SizeMFlop int64 `json:"size_mflop"`
	Spec      Spec  `json:"spec"`
}

// CancelTask cancels one of the acting organisation's non-terminal tasks.
// A running task's segment stays open (OutcomeCancelling) until the
// machine's owner reports the stop with TaskStopped.
type CancelTask struct {
	Task string `json:"task"`
}

func (*CancelTask) Kind() Kind { return KindCancelTask }

// DecisionKind is what a decision does (policy.Allocate, policy.Preempt).
type DecisionKind string

const (
	DecideAllocate DecisionKind = "allocate"
	DecidePreempt  DecisionKind = "preempt"
)

// Decision is a policy.Decision with IDs instead of view indices.
type Decision struct {
	Kind    DecisionKind `json:"kind"`
	Task    string       `json:"task"`
	Machine string       `json:"machine"`
	// Victim is the task stopped on Machine (preempt only).
	Victim string `json:"victim,omitempty"`
}

// Decisions is one scheduling pass of the leader: the acting peer is the
// proposer (the consensus layer lets only the leader propose these), the
// acting organisation its organisation.
//
// Rule (Nomad's plan applier): the decisions are applied in order, each one
// validated against the state as left by the previous ones. A decision that
// no longer holds (task not queued, machine not free or lost, victim not on
// the machine, limit would be exceeded) is rejected on its own with a code in
// Result.Decisions, and the others still apply. A leader that decided on a
// stale view thus loses some decisions but can never break an invariant.
// Only an envelope error (version, identity, shape) rejects the whole batch.
type Decisions struct {
	// ViewIndex is the applied index of the view the leader decided on. It is
	// informational (logged, reported); validation is against the state.
	ViewIndex uint64     `json:"view_index"`
	Decisions []Decision `json:"decisions"`
}

func (*Decisions) Kind() Kind { return KindDecisions }

// A federation whose rules carry Scheduling refuses decisions batches
// (CodeSchedulingMode): its peers compute every pass themselves from a
// schedule trigger (schedule.go), so that a leader cannot choose
// placements.

// leaderOnly: decisions come only from the leader's own scheduling loop.
func (*Decisions) leaderOnly() bool { return true }

// wakesScheduler: the leader's own decisions were already decided on.
func (*Decisions) wakesScheduler(*Result) bool { return false }

// TaskStarted reports that the owner of Machine started the task assigned to
// it. It opens a segment at AtMs.
//
// The optional fields say what state the run starts from, so that the
// ledger's remaining work matches what the run will actually do (issue 5).
// A command without them (an older proposer) changes nothing: the run is
// assumed to resume from the recorded checkpoint, as before.
//   - FromCheckpoint and RestoredProgressMFlop: the run restored the
//     checkpoint with this hash, which saves this much work. Both must
//     match the task's recorded checkpoint (CodeBadState otherwise: the run
//     holds a state the ledger does not describe).
//   - FromZero: the run starts from nothing. If the task has a recorded
//     checkpoint (it could not be restored: lost, corrupt, refused), the
//     reference is dropped and the remaining work goes back to the task's
//     whole size.
type TaskStarted struct {
	Task                  string `json:"task"`
	Machine               string `json:"machine"`
	FromCheckpoint        string `json:"from_checkpoint,omitempty"`
	RestoredProgressMFlop int64  `json:"restored_progress_mflop,omitempty"`
	FromZero              bool   `json:"from_zero,omitempty"`
}

func (*TaskStarted) Kind() Kind { return KindTaskStarted }

// wakesScheduler: a start turns an assigned task into a running one on the
// machine that already held it, which frees no room and queues nothing;
// the run's time, which the policy weighs for a preemption, grows with the
// clock, which the leader's periodic tick covers (as it covers a recorded
// checkpoint's progress, and the rare start that drops an unrestorable
// checkpoint). Not waking on it saves a pass that would decide nothing
// after every start (docs/BENCHMARKS.md, issue 22).
func (*TaskStarted) wakesScheduler(*Result) bool { return false }

// TaskStopped reports that the owner of Machine stopped a task the ledger had
// preempted or cancelled there, with the energy measured for that segment
// and, optionally, the checkpoint taken at the stop (applied while the task
// waits in the queue or is assigned to a machine that has not started it
// yet; ignored, with a note, once it runs again or has ended). Applying it
// to an assigned task lets the next machine's owner wait for the stop
// report and resume from it: the start it then reports names the
// checkpoint (TaskStarted.FromCheckpoint).
type TaskStopped struct {
	Task         string          `json:"task"`
	Machine      string          `json:"machine"`
	EnergyMilliJ int64           `json:"energy_mj"`
	Source       EnergySource    `json:"source"`
	Checkpoint   *CheckpointData `json:"checkpoint,omitempty"`
}

func (*TaskStopped) Kind() Kind { return KindTaskStopped }

// TaskEnded reports that the task running on Machine exited: done, or
// failed (Failed). A task that failed before it started (still assigned) may
// report Failed with no energy. If the ledger had already preempted or
// cancelled the task on that machine, the report closes that segment
// instead; a preempted task that is still queued then counts as done.
type TaskEnded struct {
	Task         string       `json:"task"`
	Machine      string       `json:"machine"`
	Failed       bool         `json:"failed,omitempty"`
	ExitCode     int          `json:"exit_code"`
	Reason       string       `json:"reason,omitempty"`
	EnergyMilliJ int64        `json:"energy_mj"`
	Source       EnergySource `json:"source"`
}

func (*TaskEnded) Kind() Kind { return KindTaskEnded }

// Heartbeat records that the owner's machine is alive; a lost machine comes
// back up. Heartbeats may also travel by gossip only; this command exists
// for the transitions.
type Heartbeat struct {
	Machine string `json:"machine"`
}

func (*Heartbeat) Kind() Kind { return KindHeartbeat }

// wakesScheduler: a heartbeat changes the view only in ways the leader's
// periodic tick covers.
func (*Heartbeat) wakesScheduler(*Result) bool { return false }

// MachineLostCmd declares a machine lost: its assigned and running tasks go
// back to the queue (keeping their checkpointed progress) and every open
// segment on it is closed with the declared energy estimate
// (busy power × duration). The machine's owner may send it; so may the
// leader for any machine whose heartbeats stopped (the consensus layer lets
// only the leader propose it for another organisation's machine).
type MachineLostCmd struct {
	Machine string `json:"machine"`
}

func (*MachineLostCmd) Kind() Kind { return KindMachineLost }

// CheckpointRecorded records a checkpoint of the task running on Machine,
// reported by the machine's owner. Progress never goes backwards.
type CheckpointRecorded struct {
	Task       string         `json:"task"`
	Machine    string         `json:"machine"`
	Checkpoint CheckpointData `json:"checkpoint"`
}

func (*CheckpointRecorded) Kind() Kind { return KindCheckpoint }

// wakesScheduler: a checkpoint record changes the view only in ways the
// leader's periodic tick covers.
func (*CheckpointRecorded) wakesScheduler(*Result) bool { return false }

// CheckpointData is a checkpoint reference as reported (AtMs comes from the
// command).
type CheckpointData struct {
	Hash          string   `json:"hash"`
	SizeBytes     int64    `json:"size_bytes"`
	ProgressMFlop int64    `json:"progress_mflop"`
	Holders       []string `json:"holders"`
}

// EncodeCommand encodes c deterministically. A zero V is set to the
// command's required version (RequiredVersion: CommandVersion unless it
// sets a field added since). It validates the command's shape (not its meaning against
// a state) so that a proposer learns of a malformed command before it
// reaches the log.
func EncodeCommand(c Command) ([]byte, error) {
	if c.V == 0 {
		c.V, _ = RequiredVersion(&c)
	}
	if err := checkVersion(&c, "encodes"); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, errf(CodeMalformed, "encode command: %v", err)
	}
	if len(b) > MaxCommandBytes {
		return nil, errf(CodeMalformed, "command is %d bytes, more than %d", len(b), MaxCommandBytes)
	}
	return b, nil
}

// DecodeCommand decodes and shape-checks a command: a version this ledger
// applies and no field newer than it, no unknown fields, no trailing data,
// exactly one body, every field in range. The error is an *Error
// (CodeBadVersion or CodeMalformed); NewerVersion tells a command of a newer
// build from one that is simply bad.
func DecodeCommand(data []byte) (Command, error) {
	if len(data) > MaxCommandBytes {
		return Command{}, errf(CodeMalformed, "command is %d bytes, more than %d", len(data), MaxCommandBytes)
	}
	var c Command
	if err := decodeStrict(data, &c); err != nil || c.V < CommandVersion || c.V > MaxCommandVersion() {
		// A newer command may carry fields this version does not know: read
		// the version leniently so that it is reported as a version
		// mismatch, not as garbage. Only rejected entries pay this second
		// parse.
		var hdr struct {
			V *int `json:"v"`
		}
		if herr := json.Unmarshal(data, &hdr); herr == nil && hdr.V != nil && (*hdr.V < CommandVersion || *hdr.V > MaxCommandVersion()) {
			return Command{}, errf(CodeBadVersion, "command version %d: this ledger applies version %d", *hdr.V, MaxCommandVersion())
		}
		if err == nil {
			return Command{}, errf(CodeMalformed, "command has no version field \"v\"")
		}
		return Command{}, errf(CodeMalformed, "decode command: %v", err)
	}
	if err := checkVersion(&c, "applies"); err != nil {
		return Command{}, err
	}
	if err := c.validate(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// validate checks the command's shape, independent of any state.
func (c *Command) validate() *Error {
	if !validName(c.Org) {
		return errf(CodeMalformed, "acting organisation %q: want 1-%d characters of [A-Za-z0-9._-], starting with a letter or digit", c.Org, MaxNameLen)
	}
	if !validPeer(c.Peer) {
		return errf(CodeMalformed, "acting peer %q: want 1-%d characters of [A-Za-z0-9]", c.Peer, MaxPeerIDLen)
	}
	if c.AtMs < 0 || c.AtMs > MaxTimeMs {
		return errf(CodeMalformed, "at_ms %d out of range [0, %d]", c.AtMs, int64(MaxTimeMs))
	}
	if n := len(c.Sig); n != 0 && n != SignatureSize {
		return errf(CodeMalformed, "signature is %d bytes: an Ed25519 signature has %d", n, SignatureSize)
	}
	b := c.Body()
	if b == nil {
		return errf(CodeMalformed, "a command carries exactly one body")
	}
	return b.validate()
}

func (b *RegisterOrg) validate() *Error {
	if err := validLimit(b.LimitMilliW); err != nil {
		return err
	}
	if len(b.Machines) > MaxMachinesPerCommand {
		return errf(CodeMalformed, "%d machines, more than %d", len(b.Machines), MaxMachinesPerCommand)
	}
	seen := make(map[string]struct{}, len(b.Machines))
	for i, m := range b.Machines {
		if err := m.validate(); err != nil {
			return errf(CodeMalformed, "machines[%d]: %s", i, err.Msg)
		}
		if _, dup := seen[m.Name]; dup {
			return errf(CodeMalformed, "machines[%d]: duplicate name %q", i, m.Name)
		}
		seen[m.Name] = struct{}{}
	}
	if b.Rules != nil {
		return b.Rules.validate()
	}
	return nil
}

func (b *AddMachine) validate() *Error    { return b.Machine.validate() }
func (b *RemoveMachine) validate() *Error { return validMachineRef(b.Machine) }
func (b *SetLimit) validate() *Error      { return validLimit(b.LimitMilliW) }

func (b *SubmitTasks) validate() *Error {
	if b.RequestID != "" {
		if err := validRequestIDErr(b.RequestID); err != nil {
			return err
		}
	}
	ts := b.Tasks
	if len(ts) == 0 || len(ts) > MaxTasksPerCommand {
		return errf(CodeMalformed, "%d tasks: want 1 to %d", len(ts), MaxTasksPerCommand)
	}
	for i := range ts {
		if ts[i].SizeMFlop <= 0 || ts[i].SizeMFlop > MaxSizeMFlop {
			return errf(CodeMalformed, "tasks[%d]: size %d MFlop out of range [1, %d]", i, ts[i].SizeMFlop, int64(MaxSizeMFlop))
		}
		if err := ts[i].Spec.validate(); err != nil {
			return errf(CodeMalformed, "tasks[%d]: %s", i, err.Msg)
		}
	}
	return validateGangs(ts)
}

func (b *CancelTask) validate() *Error { return validTaskRef(b.Task) }

// validate checks the size only: per-decision shape problems are reported
// per decision by Apply, so that one bad decision does not sink the whole
// pass.
func (b *Decisions) validate() *Error {
	if n := len(b.Decisions); n > MaxDecisionsPerCommand {
		return errf(CodeMalformed, "%d decisions, more than %d", n, MaxDecisionsPerCommand)
	}
	return nil
}

func (b *TaskStarted) validate() *Error {
	if err := validRunRef(b.Task, b.Machine); err != nil {
		return err
	}
	return b.validateStartState()
}

func (b *TaskStopped) validate() *Error {
	if err := validRunRef(b.Task, b.Machine); err != nil {
		return err
	}
	if err := validEnergy(b.EnergyMilliJ, b.Source); err != nil {
		return err
	}
	if b.Checkpoint != nil {
		return b.Checkpoint.validate()
	}
	return nil
}

func (b *TaskEnded) validate() *Error {
	if err := validRunRef(b.Task, b.Machine); err != nil {
		return err
	}
	if err := validEnergy(b.EnergyMilliJ, b.Source); err != nil {
		return err
	}
	if b.ExitCode < -1<<31 || b.ExitCode > 1<<31-1 {
		return errf(CodeMalformed, "exit code %d out of the int32 range", b.ExitCode)
	}
	if len(b.Reason) > MaxReasonBytes {
		return errf(CodeMalformed, "reason is %d bytes, more than %d", len(b.Reason), MaxReasonBytes)
	}
	return nil
}

func (b *Heartbeat) validate() *Error      { return validMachineRef(b.Machine) }
func (b *MachineLostCmd) validate() *Error { return validMachineRef(b.Machine) }

func (b *CheckpointRecorded) validate() *Error {
	if err := validRunRef(b.Task, b.Machine); err != nil {
		return err
	}
	return b.Checkpoint.validate()
}

// validRunRef checks the task and machine a report is about.
func validRunRef(task, machine string) *Error {
	if err := validTaskRef(task); err != nil {
		return err
	}
	return validMachineRef(machine)
}

func (m MachineSpec) validate() *Error {
	if !validName(m.Name) {
		return errf(CodeMalformed, "machine name %q: want 1-%d characters of [A-Za-z0-9._-], starting with a letter or digit", m.Name, MaxNameLen)
	}
	if m.MFLOPS <= 0 || m.MFLOPS > MaxMFLOPS {
		return errf(CodeMalformed, "machine %q: %d MFLOPS out of range [1, %d]", m.Name, m.MFLOPS, int64(MaxMFLOPS))
	}
	if m.BusyMilliW <= 0 || m.BusyMilliW > MaxMachineMilliW {
		return errf(CodeMalformed, "machine %q: busy power %d mW out of range [1, %d]", m.Name, m.BusyMilliW, int64(MaxMachineMilliW))
	}
	if m.IdleMilliW < 0 || m.IdleMilliW > MaxMachineMilliW {
		return errf(CodeMalformed, "machine %q: idle power %d mW out of range [0, %d]", m.Name, m.IdleMilliW, int64(MaxMachineMilliW))
	}
	return m.MachineResources.validate(m.Name)
}

func (s *Spec) validate() *Error {
	if len(s.Argv) > MaxArgv {
		return errf(CodeMalformed, "argv has %d elements, more than %d", len(s.Argv), MaxArgv)
	}
	for i, a := range s.Argv {
		if len(a) > MaxArgBytes || strings.IndexByte(a, 0) >= 0 {
			return errf(CodeMalformed, "argv[%d]: longer than %d bytes or contains NUL", i, MaxArgBytes)
		}
	}
	if len(s.Env) > MaxEnv {
		return errf(CodeMalformed, "env has %d entries, more than %d", len(s.Env), MaxEnv)
	}
	for k, v := range s.Env {
		if !validEnvKey(k) {
			return errf(CodeMalformed, "env key %q: want [A-Za-z_][A-Za-z0-9_]*, at most %d characters", k, MaxEnvKeyLen)
		}
		if len(v) > MaxArgBytes || strings.IndexByte(v, 0) >= 0 {
			return errf(CodeMalformed, "env %s: value longer than %d bytes or contains NUL", k, MaxArgBytes)
		}
	}
	if s.WallLimitMs < 0 || s.WallLimitMs > MaxTimeMs {
		return errf(CodeMalformed, "wall_limit_ms %d out of range [0, %d]", s.WallLimitMs, int64(MaxTimeMs))
	}
	for _, files := range []struct {
		what  string
		names []string
	}{{"inputs", s.Inputs}, {"outputs", s.Outputs}} {
		if len(files.names) > MaxFiles {
			return errf(CodeMalformed, "%s: %d names, more than %d", files.what, len(files.names), MaxFiles)
		}
		seen := make(map[string]struct{}, len(files.names))
		for i, n := range files.names {
			if !validFileName(n) {
				return errf(CodeMalformed, "%s[%d] %q: want a clean relative path of at most %d bytes, without ..", files.what, i, n, MaxFileNameLen)
			}
			if _, dup := seen[n]; dup {
				return errf(CodeMalformed, "%s[%d]: duplicate %q", files.what, i, n)
			}
			seen[n] = struct{}{}
		}
	}
	if err := s.TaskRequest.validate(); err != nil {
		return err
	}
	if err := s.validateRetry(); err != nil {
		return err
	}
	if err := s.validateDeadline(); err != nil {
		return err
	}
	if s.Gang != nil {
		if err := s.Gang.validate(); err != nil {
			return err
		}
	}
	if s.Moldable != nil {
		if err := s.Moldable.validate(s); err != nil {
			return err
		}
	}
	if len(s.Name) > MaxTaskNameBytes || !printable(s.Name) {
		return errf(CodeMalformed, "name: want at most %d bytes of valid UTF-8 without control characters", MaxTaskNameBytes)
	}
	if len(s.InputDigests) > 0 {
		if len(s.InputDigests) != len(s.Inputs) {
			return errf(CodeMalformed, "input_digests: %d digests for %d inputs", len(s.InputDigests), len(s.Inputs))
		}
		for i, d := range s.InputDigests {
			if !ValidDigest(d) {
				return errf(CodeMalformed, "input_digests[%d] %q: want 64 lowercase hex digits (sha256)", i, d)
			}
		}
	}
	return nil
}

// ValidDigest reports whether d is a sha256 digest in lowercase hex, the
// form of Spec.InputDigests.
func ValidDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// printable accepts valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// validateStartState checks the optional fields of a start report.
func (b *TaskStarted) validateStartState() *Error {
	switch {
	case b.FromZero && (b.FromCheckpoint != "" || b.RestoredProgressMFlop != 0):
		return errf(CodeMalformed, "a run starts either from zero or from a checkpoint, not both")
	case b.FromCheckpoint == "" && b.RestoredProgressMFlop != 0:
		return errf(CodeMalformed, "restored progress %d MFlop without the checkpoint it came from", b.RestoredProgressMFlop)
	case b.FromCheckpoint != "":
		if err := validCheckpointHash(b.FromCheckpoint); err != nil {
			return err
		}
		if b.RestoredProgressMFlop < 0 || b.RestoredProgressMFlop > MaxSizeMFlop {
			return errf(CodeMalformed, "restored progress %d MFlop out of range [0, %d]", b.RestoredProgressMFlop, int64(MaxSizeMFlop))
		}
	}
	return nil
}

func validCheckpointHash(h string) *Error {
	if h == "" || len(h) > MaxCheckpointHash || !isAlnumOr(h, ":_-") {
		return errf(CodeMalformed, "checkpoint hash %q: want 1-%d characters of [A-Za-z0-9:_-]", h, MaxCheckpointHash)
	}
	return nil
}

func (d *CheckpointData) validate() *Error {
	if err := validCheckpointHash(d.Hash); err != nil {
		return err
	}
	if d.SizeBytes < 0 || d.SizeBytes > MaxCheckpointSize {
		return errf(CodeMalformed, "checkpoint size %d bytes out of range [0, %d]", d.SizeBytes, int64(MaxCheckpointSize))
	}
	if d.ProgressMFlop < 0 || d.ProgressMFlop > MaxSizeMFlop {
		return errf(CodeMalformed, "checkpoint progress %d MFlop out of range [0, %d]", d.ProgressMFlop, int64(MaxSizeMFlop))
	}
	if len(d.Holders) == 0 || len(d.Holders) > MaxHolders {
		return errf(CodeMalformed, "checkpoint has %d holders: want 1 to %d", len(d.Holders), MaxHolders)
	}
	seen := make(map[string]struct{}, len(d.Holders))
	for i, h := range d.Holders {
		if !validPeer(h) {
			return errf(CodeMalformed, "checkpoint holders[%d] %q: not a peer ID", i, h)
		}
		if _, dup := seen[h]; dup {
			return errf(CodeMalformed, "checkpoint holders[%d]: duplicate %q", i, h)
		}
		seen[h] = struct{}{}
	}
	return nil
}

func validLimit(l int64) *Error {
	if l < 0 || l > MaxLimitMilliW {
		return errf(CodeMalformed, "power limit %d mW out of range [0, %d]", l, int64(MaxLimitMilliW))
	}
	return nil
}

func validEnergy(mj int64, src EnergySource) *Error {
	if mj < 0 || mj > MaxSegmentMilliJ {
		return errf(CodeMalformed, "energy %d mJ out of range [0, %d]", mj, int64(MaxSegmentMilliJ))
	}
	if !src.valid() {
		return errf(CodeMalformed, "energy source %q: want rapl, declared or simulated", src)
	}
	return nil
}

func validMachineRef(id string) *Error {
	org, name, ok := strings.Cut(id, "/")
	if !ok || !validName(org) || !validName(name) {
		return errf(CodeMalformed, "machine ID %q: want <org>/<name>", id)
	}
	return nil
}

func validTaskRef(id string) *Error {
	if id == "" || len(id) > MaxTaskIDLen || !isAlnumOr(id, "._-") {
		return errf(CodeMalformed, "task ID %q: want <org>-<n>", id)
	}
	return nil
}

// validName accepts organisation and machine names: 1-64 characters of
// [A-Za-z0-9._-], starting with a letter or digit (so never "." or "..").
func validName(s string) bool { return ValidIdent(s, MaxNameLen) }

// validPeer accepts the textual forms of libp2p peer IDs (base58btc or a
// base32 CID), which are alphanumeric. It checks the shape only: a signed
// command's peer must also embed an Ed25519 key (PeerKey, sign.go).
func validPeer(s string) bool {
	return s != "" && len(s) <= MaxPeerIDLen && isAlnumOr(s, "")
}

func validEnvKey(k string) bool {
	if k == "" || len(k) > MaxEnvKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

func validFileName(n string) bool {
	if n == "" || len(n) > MaxFileNameLen || strings.IndexByte(n, 0) >= 0 || strings.HasPrefix(n, "/") {
		return false
	}
	if path.Clean(n) != n || n == "." || n == ".." || strings.HasPrefix(n, "../") {
		return false
	}
	return true
}

func isAlnum(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
}

func isAlnumOr(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && strings.IndexByte(extra, s[i]) < 0 {
			return false
		}
	}
	return true
}
