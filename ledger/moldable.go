package ledger

import "github.com/coopgrid/coopgrid/policy"

// Moldable records a moldable task's alternative requests and the one the
// submitting peer chose for it with SA_s (seed 002 chapter 5; docs/POLICY.md,
// "SA live"). The ledger runs the chosen request, which the spec carries
// as any task's (TaskRequest.CPUs, WallLimitMs, Gang); the record is for
// people (`peer task`) and for a later SA_i, which would re-choose at
// start. The predictions are the submitter's, on its view when it
// submitted: nothing checks them against what happened.
type Moldable struct {
	Alternatives []Alternative `json:"alternatives,omitempty" since:"3"`
	// Chosen indexes Alternatives: the request the task runs with.
	Chosen int `json:"chosen,omitempty" since:"3"`
}

// Alternative is one request of a moldable task: Nodes machines (1, or a
// gang of Nodes parts), CPUs on each (0: one), WallLimitMs; and its
// predicted start and end, Unix ms on the submitting peer's clock (0:
// never, for the prediction).
type Alternative struct {
	Nodes            int   `json:"nodes,omitempty" since:"3"`
	CPUs             int64 `json:"cpus,omitempty" since:"3"`
	WallLimitMs      int64 `json:"wall_limit_ms,omitempty" since:"3"`
	PredictedStartMs int64 `json:"predicted_start_ms,omitempty" since:"3"`
	PredictedEndMs   int64 `json:"predicted_end_ms,omitempty" since:"3"`
}

// MaxAlternatives bounds a task's alternatives (policy.MaxSAAlternatives).
const MaxAlternatives = policy.MaxSAAlternatives

// validate checks m on spec s: the alternatives' bounds, and that s runs
// the chosen one.
func (m *Moldable) validate(s *Spec) *Error {
	if n := len(m.Alternatives); n < 2 || n > MaxAlternatives {
		return errf(CodeMalformed, "moldable: %d alternatives: want 2 to %d", n, MaxAlternatives)
	}
	for i, a := range m.Alternatives {
		switch {
		case a.Nodes < 1 || a.Nodes > MaxGangSize:
			return errf(CodeMalformed, "moldable: alternatives[%d]: nodes %d out of range [1, %d]", i, a.Nodes, MaxGangSize)
		case a.CPUs < 0 || a.CPUs > policy.MaxCPUs:
			return errf(CodeMalformed, "moldable: alternatives[%d]: cpus %d out of range [0, %d]", i, a.CPUs, policy.MaxCPUs)
		case a.WallLimitMs <= 0:
			return errf(CodeMalformed, "moldable: alternatives[%d]: wall_limit_ms %d: want > 0", i, a.WallLimitMs)
		case a.PredictedStartMs < 0 || a.PredictedEndMs < a.PredictedStartMs:
			return errf(CodeMalformed, "moldable: alternatives[%d]: predicted %d to %d ms: want 0 ≤ start ≤ end", i, a.PredictedStartMs, a.PredictedEndMs)
		}
	}
	if m.Chosen < 0 || m.Chosen >= len(m.Alternatives) {
		return errf(CodeMalformed, "moldable: chosen %d of %d alternatives", m.Chosen, len(m.Alternatives))
	}
	c := m.Alternatives[m.Chosen]
	nodes := 1
	if s.Gang != nil {
		nodes = s.Gang.Size
	}
	if c.Nodes != nodes || max(c.CPUs, 1) != max(s.CPUs, 1) || c.WallLimitMs != s.WallLimitMs {
		return errf(CodeMalformed, "moldable: the task runs %d nodes of %d cpus for %d ms, its chosen alternative %d is %d of %d for %d ms",
			nodes, max(s.CPUs, 1), s.WallLimitMs, m.Chosen, c.Nodes, max(c.CPUs, 1), c.WallLimitMs)
	}
	return nil
}

// Clone copies m (nil stays nil).
func (m *Moldable) Clone() *Moldable {
	if m == nil {
		return nil
	}
	c := *m
	c.Alternatives = append([]Alternative(nil), m.Alternatives...)
	return &c
}
