// Package api is the peer's HTTP API: the JSON contract between the
// daemon (package node implements Backend) and its clients (the CLI through
// Client, the dashboard, scripts). The server binds to localhost by default
// and requires the bearer token generated into the data directory.
package api

import (
	"context"
	"fmt"
	"net/http"
)

// Backend is what the HTTP server needs from the daemon. Every method may
// return an *Error to choose the status and code; any other error is a 500
// "internal".
type Backend interface {
	// Status describes this peer, the federation and every organisation.
	Status(ctx context.Context) (Status, error)
	Orgs(ctx context.Context) ([]OrgView, error)
	Machines(ctx context.Context) ([]MachineView, error)
	Tasks(ctx context.Context, q TaskQuery) ([]TaskView, error)
	// Task returns one task in detail; *Error with CodeNotFound if unknown.
	Task(ctx context.Context, id string) (TaskDetail, error)
	// Submit queues tasks for this peer's organisation and returns their IDs
	// in the order given. A request whose RequestID the ledger already
	// applied for this organisation returns the original IDs with Replayed
	// set, and queues nothing.
	Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error)
	// Cancel cancels one of this organisation's tasks.
	Cancel(ctx context.Context, id string) error
	// Retry queues one of this organisation's failed or cancelled tasks
	// again, as a new attempt (ledger retry_task).
	Retry(ctx context.Context, id string) error
	// Logs returns a task's captured output ("stdout" or "stderr") of its
	// latest run, from whichever peer ran it.
	Logs(ctx context.Context, id, stream string) ([]byte, error)
	// SetLimit changes this organisation's power limit.
	SetLimit(ctx context.Context, req LimitRequest) (OrgView, error)
	// Ledger is the energy ledger and the replicated state's hash.
	Ledger(ctx context.Context) (LedgerView, error)
	// Leave removes this peer from the federation gracefully.
	Leave(ctx context.Context) error
}

// Stable error codes of the API. Clients match on Code, never on Message.
const (
	CodeBadRequest    = "bad_request"  // 400: malformed body or parameter
	CodeUnauthorized  = "unauthorized" // 401: missing or wrong token
	CodeForbidden     = "forbidden"    // 403: acting for another organisation
	CodeNotFound      = "not_found"    // 404: unknown task, route
	CodeConflict      = "conflict"     // 409: the state does not allow it (e.g. limit below the power in use)
	CodeTooLarge      = "too_large"    // 413: body over the limit
	CodeUnavailable   = "unavailable"  // 503: no leader, federation not reachable
	CodeInternal      = "internal"     // 500
	CodeMethodInvalid = "method_not_allowed"
)

// CodeDeadlineUnmeetable (409): a soft-deadline task of the submission
// cannot be finished by its deadline on any machine its organisation may
// use (with the 10 % margin); the message gives the fastest predicted
// finish. Nothing was queued. Submit it with a later deadline, or with
// on_miss: nice to have it queued as a nice task instead.
const CodeDeadlineUnmeetable = "deadline_unmeetable"

// CodeNoQuorum (503): the peer has known no leader for its leader wait (5 s
// with the lan preset): it reaches no majority of the voters, so the
// federation takes no write through it until they are back. The write was
// not appended (an earlier attempt of a submission may still commit: its
// request ID makes a resend safe).
const CodeNoQuorum = "no_quorum"

// Error is the JSON error body {"error":{"code":…,"message":…}} and the
// error type Backend implementations return to pick the status.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with the status that belongs to code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Status: StatusOf(code), Code: code, Message: fmt.Sprintf(format, args...)}
}

// StatusOf maps a code to its HTTP status.
func StatusOf(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict, CodeDeadlineUnmeetable:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnavailable, CodeNoQuorum:
		return http.StatusServiceUnavailable
	case CodeMethodInvalid:
		return http.StatusMethodNotAllowed
	}
	return http.StatusInternalServerError
}

// Status is GET /v1/status; `peer status --json` prints it.
type Status struct {
	Self   string     `json:"self"`   // this peer's ID
	Org    string     `json:"org"`    // this peer's organisation
	Leader string     `json:"leader"` // the Raft leader's peer ID, "" if none
	Raft   RaftStatus `json:"raft"`
	Peers  []PeerView `json:"peers"`
	Orgs   []OrgView  `json:"orgs"`
	// JobPolicy is the federation's job policy and the votes pending
	// (jobpolicy.go); omitted by a peer that cannot read its ledger yet.
	JobPolicy *JobPolicyView `json:"job_policy,omitempty"`
	// Retention is the federation's retention rule in force and the votes
	// pending (GET /v1/retention's answer); omitted by a peer that cannot
	// read its ledger yet.
	Retention *RetentionView `json:"retention,omitempty"`
	// Build is the answering peer's build; the server sets it (a Backend
	// leaves it nil).
	Build *BuildInfo `json:"build,omitempty"`
}

// RaftStatus is this peer's view of the log.
type RaftStatus struct {
	State        string `json:"state"` // Leader, Follower, Candidate, Shutdown
	AppliedIndex uint64 `json:"applied_index"`
	StateHash    string `json:"state_hash"`
	// CommandVersion is the highest command version this peer's ledger
	// applies (docs/LEDGER.md, versions and upgrades).
	CommandVersion int `json:"command_version,omitempty"`
	// Halted says why this peer stopped applying the log (an entry of a
	// newer command version: upgrade it); empty while it applies.
	Halted string `json:"halted,omitempty"`
}

// PeerView is one member of the federation.
type PeerView struct {
	ID     string   `json:"id"`
	Org    string   `json:"org"` // "" until its organisation is registered
	Voter  bool     `json:"voter"`
	Leader bool     `json:"leader"`
	Addrs  []string `json:"addrs"`
	// Reachable and LastContactMs: whether this peer heard the member's
	// heartbeats within the heartbeat timeout, and how many milliseconds
	// ago it last did (0 for this peer, -1 when never heard). The same
	// names as GET /v1/members' MemberView, seen from the answering peer.
	Reachable     bool  `json:"reachable"`
	LastContactMs int64 `json:"last_contact_ms"`
}

// OrgView is one organisation with the policy's quantities.
type OrgView struct {
	Name         string   `json:"name"`
	Peer         string   `json:"peer"`
	Machines     int      `json:"machines"`
	QuotaGFLOPS  float64  `json:"quota_gflops"`
	PowerQuotaW  float64  `json:"power_quota_w"`
	LimitW       float64  `json:"limit_w"`
	PIW          float64  `json:"pi_w"`
	AllocGFLOPS  float64  `json:"allocated_gflops"`
	DP           *float64 `json:"dp"` // null when the quota is 0
	Queued       int      `json:"queued"`
	Running      int      `json:"running"` // assigned + running
	Done         int      `json:"done"`
	Failed       int      `json:"failed"`
	Cancelled    int      `json:"cancelled"`
	EnergyJ      float64  `json:"energy_j"`       // as user: its tasks, wherever they ran
	OwnerEnergyJ float64  `json:"owner_energy_j"` // on its machines, by anyone
}

// MachineView is one machine.
type MachineView struct {
	ID              string  `json:"id"`
	Org             string  `json:"org"`
	GFLOPS          float64 `json:"gflops"`
	BusyW           float64 `json:"busy_w"`
	IdleW           float64 `json:"idle_w,omitempty"`
	State           string  `json:"state"` // up, lost
	Task            string  `json:"task,omitempty"`
	LastHeartbeatMs int64   `json:"last_heartbeat_ms"`
	// EffectiveGFLOPS is set when the ledger corrected the declared speed
	// from observed runs (docs/SECURITY.md, "Executors"): the speed the
	// scheduler uses. SpeedMismatch flags observed runs at less than half
	// the declared speed.
	EffectiveGFLOPS float64 `json:"effective_gflops,omitempty"`
	SpeedMismatch   bool    `json:"speed_mismatch,omitempty"`
	// Unprotected: the machine's owner opted in (unsafe_run_as_peer_user)
	// to tasks running with its peer's own user and privileges, neither as
	// a dedicated user nor in a sandbox (docs/SECURITY.md, "Tasks").
	Unprotected bool `json:"unprotected,omitempty"`
	// Drained: its owner drained it (peer machines drain): no new work.
	Drained bool `json:"drained,omitempty"`
	// Issue 14: the tasks it holds when several share it (Task is the
	// first), its resources (CPUs 0 means one slot), attributes, and what
	// its owner allows (nil: refuses nothing).
	Tasks       []string         `json:"tasks,omitempty"`
	CPUs        int64            `json:"cpus,omitempty"`
	MemoryBytes int64            `json:"memory_bytes,omitempty"`
	GPUs        int64            `json:"gpus,omitempty"`
	OS          string           `json:"os,omitempty"`
	Arch        string           `json:"arch,omitempty"`
	Labels      []string         `json:"labels,omitempty"`
	OwnerPolicy *OwnerPolicyView `json:"owner_policy,omitempty"`
	// Issue 20: Opportunistic, its owner may reclaim it (peer machines
	// reclaim); Reclaimed, the owner has: no grid work until released.
	Opportunistic bool `json:"opportunistic,omitempty"`
	Reclaimed     bool `json:"reclaimed,omitempty"`
	// Stability is what the ledger's history says of it; absent until the
	// federation tracks stability (docs/POLICY.md §9).
	Stability *MachineStability `json:"stability,omitempty"`
}

// MachineStability is a machine's availability history as the ledger
// folded it, up to the time the view was taken.
type MachineStability struct {
	// MTBFMs is the mean time between interruptions: UpMs divided by
	// Failures + Reclaims, UpMs itself when there were none.
	MTBFMs int64 `json:"mtbf_ms"`
	// Failures are its losses, Reclaims its owner's reclaims.
	Failures int64 `json:"failures"`
	Reclaims int64 `json:"reclaims"`
	// UpMs and DownMs are the time it was available and not.
	UpMs   int64 `json:"up_ms"`
	DownMs int64 `json:"down_ms"`
	// Availability is UpMs / (UpMs + DownMs), 1 with no history.
	Availability float64 `json:"availability"`
}

// OwnerPolicyView is what a machine's owner lets run on it.
type OwnerPolicyView struct {
	AllowAny  bool     `json:"allow_any,omitempty"`
	Allow     []string `json:"allow,omitempty"`
	MaxWallMs int64    `json:"max_wall_ms,omitempty"`
	Orgs      []string `json:"orgs,omitempty"`
}

// TaskQuery filters GET /v1/tasks (?org=&state=&limit=).
type TaskQuery struct {
	Org string `json:"org,omitempty"`
	// Job selects the tasks submitted in the job of that name.
	Job    string   `json:"job,omitempty"`
	States []string `json:"states,omitempty"`
	Limit  int      `json:"limit,omitempty"` // 0 = all
	// After is a page's cursor: only the tasks submitted after the one
	// whose Seq it is (the last Seq of the previous page; 0: the start).
	After uint64 `json:"after,omitempty"`
}

// TaskView is one line of `peer tasks`.
type TaskView struct {
	ID          string  `json:"id"`
	Org         string  `json:"org"`
	Name        string  `json:"name,omitempty"`
	State       string  `json:"state"`
	Machine     string  `json:"machine"` // the machine holding it, else the one of its latest run, else ""
	Attempts    int     `json:"attempts"`
	ExitCode    int     `json:"exit_code"`
	Reason      string  `json:"reason,omitempty"`
	SizeGFlop   float64 `json:"size_gflop"`
	SubmittedMs int64   `json:"submitted_ms"`
	EndedMs     int64   `json:"ended_ms,omitempty"`
	// Seq is the federation-wide submit order: the cursor of the next page
	// (TaskQuery.After) is the last listed task's.
	Seq uint64 `json:"seq,omitempty"`
	// Pending says why a queued task waits: a stable code (no_match,
	// power_limit, fair_share, no_free_resources, avoided, next_pass, job_policy, gang) and a
	// sentence (docs/POLICY.md, "Pending reasons"). Empty unless queued.
	Pending       string `json:"pending,omitempty"`
	PendingDetail string `json:"pending_detail,omitempty"`
	// Job is the name of the job the task was submitted in.
	Job string `json:"job,omitempty"`
	// MachineFailures counts the runs its machines failed (refused, could
	// not start, lost under it), Failures its own failures run again
	// (retries), and Avoid the machines it is not placed on while another
	// may run it (docs/JOBS.md, "Failures").
	MachineFailures int      `json:"machine_failures,omitempty"`
	Failures        int      `json:"failures,omitempty"`
	Avoid           []string `json:"avoid,omitempty"`
	// Class is "nice", "soft-deadline" or "" (none); DeadlineMs a
	// soft-deadline task's deadline (Unix ms). PredictedFinishMs is, for
	// a task placed on a machine, the predicted end of its run: the start
	// of the run (or its last checkpoint) plus its remaining work at the
	// machine's speed, without the margin; 0 otherwise.
	Class             string `json:"class,omitempty"`
	DeadlineMs        int64  `json:"deadline_ms,omitempty"`
	PredictedFinishMs int64  `json:"predicted_finish_ms,omitempty"`
	// Migrations counts the runs moved off a machine where they would
	// have missed the deadline; DeadlineNote says what the last such
	// report decided: moved, or kept running because no machine could
	// meet the deadline (docs/JOBS.md, "Progress reports").
	Migrations   int    `json:"migrations,omitempty"`
	DeadlineNote string `json:"deadline_note,omitempty"`
	// Gang is set on a part of a parallel job (docs/JOBS.md, "Parallel
	// jobs").
	Gang *GangView `json:"gang,omitempty"`
}

// GangView is a task's part in a parallel job: the gang's ID (its first
// part's task ID), this part's rank (0 to Size−1) and the number of parts.
type GangView struct {
	ID   string `json:"id"`
	Rank int    `json:"rank"`
	Size int    `json:"size"`
}

// TaskDetail is `peer task ID`.
type TaskDetail struct {
	TaskView
	RemainingGFlop float64           `json:"remaining_gflop"`
	Argv           []string          `json:"argv"`
	Env            map[string]string `json:"env,omitempty"`
	WallLimitMs    int64             `json:"wall_limit_ms,omitempty"`
	Inputs         []string          `json:"inputs,omitempty"`
	Outputs        []string          `json:"outputs,omitempty"`
	Checkpointable bool              `json:"checkpointable,omitempty"`
	// MaxAttempts is how many machine failures the task tolerates (the
	// ledger's default, 3, when the job gave none); Retries how many of
	// its own failures are run again.
	MaxAttempts int             `json:"max_attempts"`
	Retries     int             `json:"retries,omitempty"`
	Segments    []SegmentView   `json:"segments,omitempty"`
	Checkpoint  *CheckpointView `json:"checkpoint,omitempty"`
	// OutputFiles are the outputs returned to this peer's data directory
	// (absolute paths), when this peer submitted the task.
	OutputFiles []string `json:"output_files,omitempty"`
	// Moldable is a moldable task's alternatives and the one SA_s chose.
	Moldable *MoldableView `json:"moldable,omitempty"`
}

// SegmentView is one run of a task.
type SegmentView struct {
	Machine    string  `json:"machine"`
	MachineOrg string  `json:"machine_org"`
	StartMs    int64   `json:"start_ms"`
	EndMs      int64   `json:"end_ms,omitempty"`
	EnergyJ    float64 `json:"energy_j"`
	Source     string  `json:"source,omitempty"`
	Outcome    string  `json:"outcome"`
}

// CheckpointView is a task's last recorded checkpoint.
type CheckpointView struct {
	Hash          string   `json:"hash"`
	SizeBytes     int64    `json:"size_bytes"`
	AtMs          int64    `json:"at_ms"`
	ProgressGFlop float64  `json:"progress_gflop"`
	Holders       []string `json:"holders"`
}

// SubmitRequest is POST /v1/tasks: a bag of tasks already validated by the
// client (package jobfile) and validated again by the server (ValidateSubmit,
// then the backend as it encodes the ledger command).
type SubmitRequest struct {
	Job string `json:"job,omitempty"`
	// RequestID is the optional idempotency key (1-128 characters of
	// [A-Za-z0-9._:-], see ValidRequestID), scoped to this peer's
	// organisation: resending a submission with the same RequestID after
	// an unanswered attempt never queues its tasks twice. Client.Submit
	// sets a fresh one when it is empty and reuses it on its own resends.
	RequestID string       `json:"request_id,omitempty"`
	Tasks     []SubmitTask `json:"tasks"`
	// Blobs holds input contents by sha256 (lowercase hex), so that a file
	// shipped with many tasks travels once: such an InputFile gives Digest
	// and no Data. The server checks every blob against its digest and
	// fills in Data before calling Backend.Submit, which never sees Blobs.
	Blobs map[string][]byte `json:"blobs,omitempty"`
}

// SubmitTask is one task to queue. Input contents travel base64-encoded in
// the JSON body (size-limited by the server).
type SubmitTask struct {
	Name           string            `json:"name,omitempty"`
	Argv           []string          `json:"argv"`
	Env            map[string]string `json:"env,omitempty"`
	SizeMFlop      int64             `json:"size_mflop"`
	WallLimitMs    int64             `json:"wall_limit_ms,omitempty"`
	Inputs         []InputFile       `json:"inputs,omitempty"`
	Outputs        []string          `json:"outputs,omitempty"`
	Checkpointable bool              `json:"checkpointable,omitempty"`
	// CPUs (0 means 1), MemoryBytes and GPUs are what the task needs of a
	// machine; Requirements constrain the machine's attributes
	// (docs/JOBS.md, "Resources and requirements"). The ledger checks them.
	CPUs         int64         `json:"cpus,omitempty"`
	MemoryBytes  int64         `json:"memory_bytes,omitempty"`
	GPUs         int64         `json:"gpus,omitempty"`
	Requirements []Requirement `json:"requirements,omitempty"`
	// MaxAttempts (0: the default, 3; else 1-100) and Retries (0-100):
	// docs/JOBS.md, "Failures of the machine, failures of the task".
	MaxAttempts int `json:"max_attempts,omitempty"`
	Retries     int `json:"retries,omitempty"`
	// Nodes (0 or 1: one machine; 2 to MaxNodes) makes the task a
	// parallel job of Nodes parts, each asking for CPUs, MemoryBytes and
	// GPUs of its own machine, started and stopped together on machines of
	// one organisation. Its parts get one task ID each, consecutive, in
	// SubmitResponse.TaskIDs (docs/JOBS.md, "Parallel jobs").
	Nodes int `json:"nodes,omitempty"`
	// Class ("nice", "soft-deadline" or "" for none), the deadline of a
	// soft-deadline task, absolute (DeadlineMs, Unix ms) or after the
	// submission (DeadlineInMs, counted by the peer that takes it), and
	// OnMiss ("refuse", the default, or "nice"): docs/JOBS.md, "Deadlines".
	Class        string `json:"class,omitempty"`
	DeadlineMs   int64  `json:"deadline_ms,omitempty"`
	DeadlineInMs int64  `json:"deadline_in_ms,omitempty"`
	OnMiss       string `json:"on_miss,omitempty"`
	// Alternatives (2 to MaxAlternatives, or none) make the task
	// moldable: the peer chooses one with SA_s and queues the task with
	// its Nodes, CPUs and WallLimitMs instead of the task's own
	// (SubmitResponse.Moldable; docs/JOBS.md, "Moldable jobs").
	Alternatives []SubmitAlternative `json:"alternatives,omitempty"`
}

// MaxNodes bounds SubmitTask.Nodes (the ledger's ledger.MaxGangSize).
const MaxNodes = 1024

// Requirement is one constraint of a task on a machine's attributes.
type Requirement struct {
	Attribute string `json:"attribute"`
	Operator  string `json:"operator"`
	Value     string `json:"value,omitempty"`
}

// InputFile is one input file of a task.
type InputFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"` // base64 in JSON
	// Digest is the sha256 (lowercase hex) of the contents: in a request, a
	// reference to SubmitRequest.Blobs instead of Data; once the server has
	// resolved it, checked, beside the Data (so a Backend need not hash
	// again).
	Digest string `json:"digest,omitempty"`
}

// SubmitResponse lists the IDs the ledger gave, in request order.
type SubmitResponse struct {
	TaskIDs []string `json:"task_ids"`
	// RequestID is the request's idempotency key (the client's, or one the
	// peer chose when the request had none).
	RequestID string `json:"request_id,omitempty"`
	// Replayed: an earlier copy of this request (a client's resend or the
	// peer's own retry of a proposal whose outcome it did not learn) had
	// queued the tasks; TaskIDs are that copy's and nothing was queued now.
	// The server then answers 200 instead of 201.
	Replayed bool `json:"replayed,omitempty"`
	// AcceptedAsNice lists the soft-deadline tasks (with on_miss: nice)
	// that no machine could finish in time, queued as nice tasks instead;
	// Note says why.
	AcceptedAsNice []string `json:"accepted_as_nice,omitempty"`
	Note           string   `json:"note,omitempty"`
	// Moldable lists SA_s's choice for each task with alternatives (not
	// on a replay: the tasks run the first submission's choice, which
	// GET /v1/tasks/{id} shows).
	Moldable []MoldableChoice `json:"moldable,omitempty"`
}

// LimitRequest is PUT /v1/limit: exactly one of Percent (of the
// organisation's power quota) and Watts.
type LimitRequest struct {
	Percent *float64 `json:"percent,omitempty"`
	Watts   *float64 `json:"watts,omitempty"`
}

// LedgerView is GET /v1/ledger.
type LedgerView struct {
	AppliedIndex uint64          `json:"applied_index"`
	StateHash    string          `json:"state_hash"`
	Orgs         []LedgerAccount `json:"orgs"`
}

// LedgerAccount is one organisation's energy account, in joules.
type LedgerAccount struct {
	Org          string  `json:"org"`
	UserJ        float64 `json:"user_j"`         // its tasks, wherever they ran
	OwnerSelfJ   float64 `json:"owner_self_j"`   // its machines, its own tasks
	OwnerOthersJ float64 `json:"owner_others_j"` // its machines, others' tasks
	LimitW       float64 `json:"limit_w"`
	PIW          float64 `json:"pi_w"`
}
