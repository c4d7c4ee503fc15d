package ledger

// Transition is one task's change of state, as one command made it: the
// watch API (GET /v1/events) streams them. Reason is a short word for the
// cause (submitted, allocated, preempted, started, done, failed, cancelled,
// lost); Machine is the machine involved, if any.
type Transition struct {
	Task    string    `json:"task"`
	Org     string    `json:"org"`
	From    TaskState `json:"from,omitempty"` // "" for a task just submitted
	To      TaskState `json:"to"`
	Machine string    `json:"machine,omitempty"`
	Reason  string    `json:"reason"`
}

// moved records that t went from state from to its current state.
func (r *Result) moved(t *Task, from TaskState, machine, reason string) {
	r.Transitions = append(r.Transitions, Transition{Task: t.ID, Org: t.Org, From: from, To: t.State, Machine: machine, Reason: reason})
}
