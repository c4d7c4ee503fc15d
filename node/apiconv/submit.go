package apiconv

import (
	"crypto/sha256"
	"encoding/hex"
	"math"

	"github.com/coopgrid/coopgrid/api"
	"github.com/coopgrid/coopgrid/jobfile"
	"github.com/coopgrid/coopgrid/ledger"
)

// SubmitRequestFromJob turns a parsed job file into the request that
// submits it. jobfile holds a job to the ledger's own limits (its tests
// keep them in step), so the request passes api.ValidateSubmit and the
// ledger's encode check. Tasks that ship the same file share its bytes.
func SubmitRequestFromJob(job *jobfile.Job) api.SubmitRequest {
	req := api.SubmitRequest{Job: job.Name, Tasks: make([]api.SubmitTask, len(job.Tasks))}
	for i, t := range job.Tasks {
		st := api.SubmitTask{
			Name:           t.Name,
			Argv:           t.Argv,
			Env:            t.Env,
			SizeMFlop:      t.SizeMFlop,
			WallLimitMs:    t.WallClockLimit.Milliseconds(),
			Outputs:        t.Outputs,
			Checkpointable: t.Checkpointable,
			CPUs:           t.CPUs,
			MemoryBytes:    t.MemoryBytes,
			GPUs:           t.GPUs,
			MaxAttempts:    t.MaxAttempts,
			Retries:        t.Retries,
			Nodes:          t.Nodes,
			Class:          t.Class,
			DeadlineInMs:   t.Deadline.In.Milliseconds(),
			OnMiss:         t.OnMiss,
		}
		if !t.Deadline.At.IsZero() {
			st.DeadlineMs = max(t.Deadline.At.UnixMilli(), 1)
		}
		for _, r := range t.Requirements {
			st.Requirements = append(st.Requirements, api.Requirement{Attribute: r.Attribute, Operator: r.Operator, Value: r.Value})
		}
		// A limit under a millisecond still limits.
		if st.WallLimitMs == 0 && t.WallClockLimit > 0 {
			st.WallLimitMs = 1
		}
		for _, in := range t.Inputs {
			st.Inputs = append(st.Inputs, api.InputFile{Name: in.Name, Data: in.Data})
		}
		for _, a := range t.Alternatives {
			st.Alternatives = append(st.Alternatives, api.SubmitAlternative{Nodes: a.Nodes, CPUs: a.CPUs, WallLimitMs: max(a.WallClockLimit.Milliseconds(), 1)})
		}
		req.Tasks[i] = st
	}
	return req
}

// SubmitTasks converts a submission (checked by api.ValidateSubmit) to the
// body of the command that queues it, keyed by requestID ("" for none). A
// task without a name takes the job's. Input contents do not go into the
// log, only their names and sha256 digests (Spec.InputDigests): the
// submitting peer keeps the data and the machine that runs the task
// fetches and verifies it. An input's Digest is used when set (the server
// checked it in api.ResolveBlobs), else computed. The specs share no
// memory with req.
//
// A task of Nodes k ≥ 2 becomes k specs, the parts of one gang in rank
// order (ledger.Gang), which get consecutive task IDs.
//
// The ledger's own rules are not checked here but by EncodeCommand, in the
// one pass that also encodes the command.
func SubmitTasks(req api.SubmitRequest, requestID string) *ledger.SubmitTasks {
	specs := make([]ledger.TaskSpec, 0, len(req.Tasks))
	for _, t := range req.Tasks {
		s := ledger.Spec{
			Name:           t.Name,
			Argv:           append([]string(nil), t.Argv...),
			WallLimitMs:    t.WallLimitMs,
			Outputs:        append([]string(nil), t.Outputs...),
			Checkpointable: t.Checkpointable,
			TaskRequest:    ledger.TaskRequest{CPUs: t.CPUs, MemoryBytes: t.MemoryBytes, GPUs: t.GPUs},
			Job:            req.Job,
			MaxAttempts:    t.MaxAttempts,
			Retries:        t.Retries,
		}
		// The default goes into the log: a spec without it (every task
		// queued before the field existed) keeps the old rule, a machine's
		// failure final, so that old logs replay as they did.
		if s.MaxAttempts == 0 {
			s.MaxAttempts = ledger.DefaultMaxAttempts
		}
		s.Class, s.DeadlineMs = t.Class, t.DeadlineMs
		for _, r := range t.Requirements {
			s.Requirements = append(s.Requirements, ledger.Requirement{Attribute: r.Attribute, Operator: r.Operator, Value: r.Value})
		}
		if s.Name == "" {
			s.Name = req.Job
		}
		if len(t.Env) > 0 {
			s.Env = make(map[string]string, len(t.Env))
			for k, v := range t.Env {
				s.Env[k] = v
			}
		}
		for _, in := range t.Inputs {
			d := in.Digest
			if d == "" {
				d = digestOf(in.Data)
			}
			s.Inputs = append(s.Inputs, in.Name)
			s.InputDigests = append(s.InputDigests, d)
		}
		specs = append(specs, gangParts(ledger.TaskSpec{SizeMFlop: t.SizeMFlop, Spec: s}, t.Nodes)...)
	}
	return &ledger.SubmitTasks{RequestID: requestID, Tasks: specs}
}

// gangParts is ts as the parts of a gang of nodes parts (ts alone when
// nodes is below 2); the parts share no memory.
func gangParts(ts ledger.TaskSpec, nodes int) []ledger.TaskSpec {
	if nodes < 2 {
		return []ledger.TaskSpec{ts}
	}
	parts := make([]ledger.TaskSpec, nodes)
	for r := range parts {
		p := ts
		if r > 0 {
			p.Spec = cloneSpec(ts.Spec)
		}
		p.Spec.Gang = &ledger.Gang{Size: nodes, Rank: r}
		parts[r] = p
	}
	return parts
}

// cloneSpec copies a spec's slices and map.
func cloneSpec(s ledger.Spec) ledger.Spec {
	c := s
	c.Argv = append([]string(nil), s.Argv...)
	c.Outputs = append([]string(nil), s.Outputs...)
	c.Inputs = append([]string(nil), s.Inputs...)
	c.InputDigests = append([]string(nil), s.InputDigests...)
	c.Requirements = append([]ledger.Requirement(nil), s.Requirements...)
	if s.Env != nil {
		c.Env = make(map[string]string, len(s.Env))
		for k, v := range s.Env {
			c.Env[k] = v
		}
	}
	return c
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// LimitMilliW converts a PUT /v1/limit body (checked by api.ValidateLimit)
// to the ledger's limit: a percentage of powerQuotaMilliW (the
// organisation's up machines' busy power), capped at the ledger's largest
// limit, or watts.
func LimitMilliW(req api.LimitRequest, powerQuotaMilliW int64) int64 {
	if req.Percent != nil {
		x := math.Round(float64(powerQuotaMilliW) * *req.Percent / 100)
		return int64(min(x, float64(ledger.MaxLimitMilliW)))
	}
	if req.Watts != nil {
		return int64(math.Round(*req.Watts * 1000))
	}
	return 0
}

// ResolveDeadlines turns every deadline given after the submission
// (DeadlineInMs) into an absolute one at nowMs, the submitting peer's
// clock, the one the ledger's deadlines are on.
func ResolveDeadlines(req *api.SubmitRequest, nowMs int64) {
	for i := range req.Tasks {
		if t := &req.Tasks[i]; t.DeadlineInMs > 0 {
			t.DeadlineMs, t.DeadlineInMs = nowMs+t.DeadlineInMs, 0
		}
	}
}

// AcceptAsNice makes task i of b (from req) a nice task when it is a
// soft-deadline task whose submitter asked for that fallback (on_miss:
// nice), and reports whether it did.
func AcceptAsNice(b *ledger.SubmitTasks, req api.SubmitRequest, i int) bool {
	s := &b.Tasks[i].Spec
	if s.Class != ledger.ClassSoftDeadline || req.Tasks[i].OnMiss != "nice" {
		return false
	}
	s.Class, s.DeadlineMs = ledger.ClassNice, 0
	return true
}
