package api

import (
	"math"
	"regexp"
	"slices"
	"strings"
)

// Defaults of the request limits (ServerOptions, SubmitLimits).
const (
	// DefaultMaxBodyBytes bounds every request body but a submission.
	DefaultMaxBodyBytes = 64 << 10
	// DefaultMaxSubmitBytes bounds POST /v1/tasks, whose input files travel
	// base64-encoded in the body (4/3 of their size): it fits the 16 MiB of
	// inputs a job file may ship (docs/JOBS.md) with room for the tasks.
	DefaultMaxSubmitBytes = 64 << 20
	// DefaultMaxSubmitTasks is the most tasks one job file may hold.
	DefaultMaxSubmitTasks = 100_000
	// DefaultMaxInputFileBytes is the job file's limit on one input file.
	DefaultMaxInputFileBytes = 1 << 20
)

// Bounds of the contract. They are the ledger's (node/apiconv's tests keep
// them equal), stated here so that the API refuses with its own message
// what the ledger would refuse, without knowing the ledger.
const (
	// MaxRequestIDLen bounds SubmitRequest.RequestID.
	MaxRequestIDLen = 128
	// MaxTaskIDLen bounds a task ID: an organisation name (64 characters),
	// "-" and a sequence number (20 digits).
	MaxTaskIDLen = 64 + 21
	// MaxLimitW is the largest power limit, in watts.
	MaxLimitW = 1e12
	// MaxTasksPerSubmit is the most tasks one submission queues at once
	// (one ledger command on the daemon): a peer may refuse a larger one
	// with too_large, so a client sends a larger job in batches of this
	// size.
	MaxTasksPerSubmit = 10_000
)

// taskStates are the task states a TaskQuery may name, in life-cycle order.
var taskStates = []string{"queued", "assigned", "running", "done", "failed", "cancelled"}

// TaskStates returns the task states a TaskQuery may name.
func TaskStates() []string { return slices.Clone(taskStates) }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// SubmitLimits bounds a submission beyond its shape; zero fields take the
// defaults.
type SubmitLimits struct {
	MaxTasks          int
	MaxInputFileBytes int64
}

func (l SubmitLimits) withDefaults() SubmitLimits {
	if l.MaxTasks <= 0 {
		l.MaxTasks = DefaultMaxSubmitTasks
	}
	if l.MaxInputFileBytes <= 0 {
		l.MaxInputFileBytes = DefaultMaxInputFileBytes
	}
	return l
}

// ValidRequestID reports whether id is a valid SubmitRequest.RequestID:
// 1-MaxRequestIDLen characters of [A-Za-z0-9._:-].
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || strings.IndexByte("._:-", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidateSubmit checks what the API adds to a submission: a valid job
// name and request ID, a number of tasks, a command to run, a wall-clock
// limit, unique task names, input files within the limit. The server runs
// it before calling Backend.Submit. The ledger's own rules (sizes,
// environment, file names, …) are checked where the request becomes a
// ledger command (node/apiconv), in the one pass that encodes it, with
// messages of the same form. The error is a bad_request *Error naming the
// first task at fault.
func ValidateSubmit(req SubmitRequest, lim SubmitLimits) error {
	lim = lim.withDefaults()
	if req.Job != "" && !nameRE.MatchString(req.Job) {
		return Errorf(CodeBadRequest, "job name %q: want 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", req.Job)
	}
	if req.RequestID != "" && !ValidRequestID(req.RequestID) {
		return Errorf(CodeBadRequest, "request_id %q: want 1-%d characters of [A-Za-z0-9._:-]", req.RequestID, MaxRequestIDLen)
	}
	if len(req.Tasks) == 0 {
		return Errorf(CodeBadRequest, "no tasks")
	}
	if len(req.Tasks) > lim.MaxTasks {
		return Errorf(CodeBadRequest, "%d tasks, more than %d", len(req.Tasks), lim.MaxTasks)
	}
	names := make(map[string]int, len(req.Tasks))
	moldable := 0
	for i, t := range req.Tasks {
		if t.Name != "" {
			if !nameRE.MatchString(t.Name) {
				return Errorf(CodeBadRequest, "tasks[%d]: name %q: want 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", i, t.Name)
			}
			if j, dup := names[t.Name]; dup {
				return Errorf(CodeBadRequest, "tasks[%d]: name %q already used by tasks[%d]", i, t.Name, j)
			}
			names[t.Name] = i
		}
		if len(t.Argv) == 0 || t.Argv[0] == "" {
			return Errorf(CodeBadRequest, "tasks[%d]: argv: want a command to run", i)
		}
		if t.MaxAttempts < 0 || t.MaxAttempts > 100 || t.Retries < 0 || t.Retries > 100 {
			return Errorf(CodeBadRequest, "tasks[%d]: max_attempts %d, retries %d: want 0-100 each", i, t.MaxAttempts, t.Retries)
		}
		if t.Nodes < 0 || t.Nodes > MaxNodes {
			return Errorf(CodeBadRequest, "tasks[%d]: nodes %d: want 0 to %d", i, t.Nodes, MaxNodes)
		}
		if t.WallLimitMs <= 0 {
			return Errorf(CodeBadRequest, "tasks[%d]: wall_limit_ms %d: want > 0", i, t.WallLimitMs)
		}
		if err := validateDeadline(i, t); err != nil {
			return err
		}
		if err := validateAlternatives(i, t, &moldable); err != nil {
			return err
		}
		for j, in := range t.Inputs {
			if int64(len(in.Data)) > lim.MaxInputFileBytes {
				return Errorf(CodeBadRequest, "tasks[%d]: inputs[%d] %q: %d bytes, more than %d", i, j, in.Name, len(in.Data), lim.MaxInputFileBytes)
			}
		}
	}
	return nil
}

// ValidateLimit checks a PUT /v1/limit body: exactly one of Percent and
// Watts, finite and not negative. A percentage may exceed 100: an
// organisation's tasks may run on other organisations' machines, so its
// power in use can exceed its own power quota.
func ValidateLimit(req LimitRequest) error {
	switch {
	case (req.Percent == nil) == (req.Watts == nil):
		return Errorf(CodeBadRequest, "give exactly one of percent and watts")
	case req.Percent != nil:
		p := *req.Percent
		if math.IsNaN(p) || math.IsInf(p, 0) || p < 0 || p > 1e6 {
			return Errorf(CodeBadRequest, "percent %v: want 0 to 1000000", p)
		}
	default:
		w := *req.Watts
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w > MaxLimitW {
			return Errorf(CodeBadRequest, "watts %v: want 0 to %g", w, float64(MaxLimitW))
		}
	}
	return nil
}

// ValidateTaskQuery checks the filters of GET /v1/tasks.
func ValidateTaskQuery(q TaskQuery) error {
	if q.Org != "" && !nameRE.MatchString(q.Org) {
		return Errorf(CodeBadRequest, "org %q: not an organisation name", q.Org)
	}
	if q.Job != "" && !nameRE.MatchString(q.Job) {
		return Errorf(CodeBadRequest, "job %q: not a job name", q.Job)
	}
	for _, s := range q.States {
		if !slices.Contains(taskStates, s) {
			return Errorf(CodeBadRequest, "state %q: want one of %s", s, strings.Join(taskStates, ", "))
		}
	}
	if q.Limit < 0 {
		return Errorf(CodeBadRequest, "limit %d: want 0 (all) or more", q.Limit)
	}
	return nil
}

// ValidTaskID says whether id has the shape of a ledger task ID
// ("<org>-<n>"); a malformed ID is a bad request, a well-formed unknown one
// is not found.
func ValidTaskID(id string) bool {
	if id == "" || len(id) > MaxTaskIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validateDeadline checks a task's class, deadline and on_miss together.
func validateDeadline(i int, t SubmitTask) error {
	switch t.Class {
	case "", "nice":
		if t.DeadlineMs != 0 || t.DeadlineInMs != 0 || t.OnMiss != "" {
			return Errorf(CodeBadRequest, "tasks[%d]: deadline and on_miss need class soft-deadline", i)
		}
	case "soft-deadline":
		if (t.DeadlineMs > 0) == (t.DeadlineInMs > 0) || t.DeadlineMs < 0 || t.DeadlineInMs < 0 {
			return Errorf(CodeBadRequest, "tasks[%d]: a soft-deadline task needs exactly one of deadline_ms and deadline_in_ms, > 0", i)
		}
		if t.OnMiss != "" && t.OnMiss != "refuse" && t.OnMiss != "nice" {
			return Errorf(CodeBadRequest, "tasks[%d]: on_miss %q: want refuse or nice", i, t.OnMiss)
		}
	default:
		return Errorf(CodeBadRequest, "tasks[%d]: class %q: want nice or soft-deadline", i, t.Class)
	}
	return nil
}
