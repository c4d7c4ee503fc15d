package api

// Moldable tasks (SA_s; docs/JOBS.md, "Moldable jobs"): a task may list
// alternative requests; the peer that takes the submission chooses one
// with SA_s on its view of the ledger and queues the task with it.

// MaxAlternatives bounds SubmitTask.Alternatives (policy.MaxSAAlternatives).
const MaxAlternatives = 16

// MaxMoldablePerSubmit bounds the tasks with alternatives in one
// submission: the peer simulates its queue once for each.
const MaxMoldablePerSubmit = 100

// SubmitAlternative is one request a moldable task may run with: Nodes
// machines (1 to MaxNodes: 2 or more make it a parallel job), CPUs on each
// (0: one) and its wall-clock limit (> 0).
type SubmitAlternative struct {
	Nodes       int   `json:"nodes"`
	CPUs        int64 `json:"cpus,omitempty"`
	WallLimitMs int64 `json:"wall_limit_ms"`
}

// MoldableView is a moldable task's alternatives, with the start and end
// the choosing peer predicted for each (Unix ms on its clock; 0 when it
// predicted that the alternative would never start), and the chosen one:
// the request the task runs with.
type MoldableView struct {
	Alternatives []AlternativeView `json:"alternatives"`
	Chosen       int               `json:"chosen"`
}

// AlternativeView is one alternative and its prediction.
type AlternativeView struct {
	Nodes            int   `json:"nodes"`
	CPUs             int64 `json:"cpus,omitempty"`
	WallLimitMs      int64 `json:"wall_limit_ms"`
	PredictedStartMs int64 `json:"predicted_start_ms,omitempty"`
	PredictedEndMs   int64 `json:"predicted_end_ms,omitempty"`
}

// MoldableChoice is SA_s's choice for tasks[Task] of a submission.
type MoldableChoice struct {
	Task int `json:"task"`
	MoldableView
}

// validateAlternatives checks tasks[i]'s alternatives; moldable counts
// the tasks with alternatives so far.
func validateAlternatives(i int, t SubmitTask, moldable *int) error {
	if len(t.Alternatives) == 0 {
		return nil
	}
	if *moldable++; *moldable > MaxMoldablePerSubmit {
		return Errorf(CodeBadRequest, "tasks[%d]: more than %d tasks with alternatives in one submission", i, MaxMoldablePerSubmit)
	}
	if n := len(t.Alternatives); n < 2 || n > MaxAlternatives {
		return Errorf(CodeBadRequest, "tasks[%d]: %d alternatives: want 2 to %d", i, n, MaxAlternatives)
	}
	if t.Class != "" {
		return Errorf(CodeBadRequest, "tasks[%d]: a task with alternatives has no class", i)
	}
	for j, a := range t.Alternatives {
		if a.Nodes < 1 || a.Nodes > MaxNodes || a.CPUs < 0 || a.CPUs > 1<<16 || a.WallLimitMs <= 0 {
			return Errorf(CodeBadRequest, "tasks[%d]: alternatives[%d]: %d nodes of %d cpus for %d ms: want 1 to %d nodes, 0 to 65536 cpus, > 0 ms",
				i, j, a.Nodes, a.CPUs, a.WallLimitMs, MaxNodes)
		}
	}
	return nil
}
