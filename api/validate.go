package api

import (
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/coopgrid/coopgrid/ledger"
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

// TaskStates are the task states a TaskQuery may name, in life-cycle order.
var taskStates = []string{
	string(ledger.TaskQueued), string(ledger.TaskAssigned), string(ledger.TaskRunning),
	string(ledger.TaskDone), string(ledger.TaskFailed), string(ledger.TaskCancelled),
}

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

// ValidateSubmit checks a submission completely: the server runs it before
// calling Backend.Submit, and the CLI before sending anything. Each task
// is held to the ledger's own rules (by encoding it as the command that
// will carry it), plus what the API adds: a command to run, unique names,
// input names matching the files sent. The error is a bad_request *Error
// naming the first task at fault.
func ValidateSubmit(req SubmitRequest, lim SubmitLimits) error {
	lim = lim.withDefaults()
	if req.Job != "" && !nameRE.MatchString(req.Job) {
		return Errorf(CodeBadRequest, "job name %q: want 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit", req.Job)
	}
	if req.RequestID != "" && !ledger.ValidRequestID(req.RequestID) {
		return Errorf(CodeBadRequest, "request_id %q: want 1-%d characters of [A-Za-z0-9._:-]", req.RequestID, ledger.MaxRequestIDLen)
	}
	if len(req.Tasks) == 0 {
		return Errorf(CodeBadRequest, "no tasks")
	}
	if len(req.Tasks) > lim.MaxTasks {
		return Errorf(CodeBadRequest, "%d tasks, more than %d", len(req.Tasks), lim.MaxTasks)
	}
	names := make(map[string]int, len(req.Tasks))
	specs := TaskSpecsToLedger(req)
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
		if t.WallLimitMs <= 0 {
			return Errorf(CodeBadRequest, "tasks[%d]: wall_limit_ms %d: want > 0", i, t.WallLimitMs)
		}
		for j, in := range t.Inputs {
			if int64(len(in.Data)) > lim.MaxInputFileBytes {
				return Errorf(CodeBadRequest, "tasks[%d]: inputs[%d] %q: %d bytes, more than %d", i, j, in.Name, len(in.Data), lim.MaxInputFileBytes)
			}
		}
		// The ledger's shape check, through the command that will carry the
		// task: the placeholder envelope is valid, so any error is the task's.
		cmd := ledger.Command{Org: "validate", Peer: "validate", SubmitTasks: &ledger.SubmitTasks{Tasks: specs[i : i+1]}}
		if _, err := ledger.EncodeCommand(cmd); err != nil {
			msg := err.Error()
			if le, ok := err.(*ledger.Error); ok {
				msg = strings.TrimPrefix(le.Msg, "tasks[0]: ")
			}
			return Errorf(CodeBadRequest, "tasks[%d]: %s", i, msg)
		}
	}
	return nil
}

// maxLimitW is the ledger's largest limit, in watts.
const maxLimitW = float64(ledger.MaxLimitMilliW) / 1000

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
		if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w > maxLimitW {
			return Errorf(CodeBadRequest, "watts %v: want 0 to %g", w, maxLimitW)
		}
	}
	return nil
}

// ValidateTaskQuery checks the filters of GET /v1/tasks.
func ValidateTaskQuery(q TaskQuery) error {
	if q.Org != "" && !nameRE.MatchString(q.Org) {
		return Errorf(CodeBadRequest, "org %q: not an organisation name", q.Org)
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
	if id == "" || len(id) > ledger.MaxTaskIDLen {
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
