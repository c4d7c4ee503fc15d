package ledger

// Ledger is the federation's replicated state. The zero value is not usable;
// call New. Not safe for concurrent use (see the package documentation).
type Ledger struct {
	applied uint64
	// seq is the last task submit sequence number handed out.
	seq uint64

	orgs     map[string]*Org
	order    []string // organisation names in registration order
	machines map[string]*Machine
	tasks    map[string]*Task
	// bySeq holds the tasks in submit order (tasks are never deleted, and
	// seq only grows, so appending keeps it sorted).
	bySeq []*Task

	// Derived indexes, rebuilt by Restore and checked by CheckInvariants.
	peers    map[string]string              // peer ID → organisation
	pi       map[string]int64               // PI_i: Σ busy mW of machines holding i's tasks
	alloc    map[string]int64               // Allocated_i: Σ MFLOPS of those machines
	stopping map[string]map[string]int      // machine → task → open preempting/cancelling segments
	byOrgM   map[string]map[string]struct{} // organisation → its machine IDs

	// The replay guard (requests.go), part of the replicated state:
	// organisation → request ID → its applied submit, and each
	// organisation's request IDs oldest first.
	requests map[string]map[string]*SubmitRecord
	reqOrder map[string][]string

	// rules are the federation's executor and queue rules (plausible.go),
	// fixed by the first registration; nil on a federation from before
	// them. unfinished (derived) counts each organisation's tasks that are
	// not done, failed or cancelled.
	rules      *Rules
	unfinished map[string]int64
	// scheduledMs is the time of the last applied schedule trigger
	// (schedule.go): the next one may not be earlier.
	scheduledMs int64

	// members holds the federation's membership decisions (membership.go).
	members membership
	// jobPol is the federation's job policy and its pending votes
	// (jobpolicy.go).
	jobPol jobPolicyState
	// stability is when the federation began folding machine stability
	// (stability.go); nil before.
	stability *stabilityState
	// retVotes are the pending retention votes (retentionvote.go).
	retVotes []*RetentionVoteRecord

	// forgotten holds what each organisation's forgotten tasks left
	// behind (retention.go).
	forgotten map[string]*ForgottenTotals

	// memo keeps the hash of the state at one applied index (hashmemo.go).
	memo *hashMemo

	// queue (derived, keptqueue.go) is the queued tasks as the scheduling
	// pass reads them, kept between passes; nil when the federation's
	// peers compute no passes.
	queue *keptQueue
	// kept (derived, keptview.go) holds the policy view's machines and
	// their prepared policy.Federation, kept between the passes that read
	// the kept queue.
	kept *keptCache
	// gangs (derived, gang.go) holds the IDs of the gangs with a part
	// that has not ended.
	gangs map[string]struct{}

	// sigs remembers verified signatures (sigcache.go): no part of the
	// state.
	sigs *sigCache
}

// New returns an empty ledger at applied index 0.
func New() *Ledger {
	return &Ledger{
		orgs:     map[string]*Org{},
		machines: map[string]*Machine{},
		tasks:    map[string]*Task{},
		peers:    map[string]string{},
		pi:       map[string]int64{},
		alloc:    map[string]int64{},
		stopping: map[string]map[string]int{},
		byOrgM:   map[string]map[string]struct{}{},
		requests: map[string]map[string]*SubmitRecord{},
		reqOrder: map[string][]string{},

		unfinished: map[string]int64{},
		forgotten:  map[string]*ForgottenTotals{},
		memo:       &hashMemo{},
		gangs:      map[string]struct{}{},
		sigs:       newSigCache(),
		kept:       &keptCache{},
	}
}

// AppliedIndex is the last log index given to Apply (accepted or not), or
// the index of the restored snapshot.
func (l *Ledger) AppliedIndex() uint64 { return l.applied }

// ChangeAction is what the owner of a machine must do after an Apply.
type ChangeAction string

const (
	// ActionStart: the task was allocated to the machine; start it and
	// report TaskStarted.
	ActionStart ChangeAction = "start"
	// ActionStop: the ledger took the task off the machine (preempted,
	// cancelled, or the machine was declared lost); stop it and, if it had
	// started, report TaskStopped with the measured energy.
	ActionStop ChangeAction = "stop"
)

// Change is one effect of a command on a machine, for the machine's owner.
type Change struct {
	Machine    string       `json:"machine"`
	MachineOrg string       `json:"machine_org"`
	Action     ChangeAction `json:"action"`
	Task       string       `json:"task"`
	// Reason is "allocated", "preempted", "cancelled" or "lost".
	Reason string `json:"reason"`
}

// DecisionResult is the fate of one decision of a batch.
type DecisionResult struct {
	Decision Decision `json:"decision"`
	// Err is nil when the decision was applied.
	Err *Error `json:"err,omitempty"`
}

// Result is what Apply did. Err is nil when the command was applied (for a
// decisions batch: the batch was well-formed and authorised; each decision
// has its own fate in Decisions).
type Result struct {
	// Index is the command's log index. A command the leader's dry run
	// (Ledger.Check) refused never reached the log: Index is then the
	// applied index of the state that refused it.
	Index uint64 `json:"index"`
	Kind  Kind   `json:"kind,omitempty"`
	// Skipped: the index was not above the applied index; nothing was done.
	Skipped bool `json:"skipped,omitempty"`
	// NotAppended: the leader's dry run refused the command (Err says
	// why); it never reached the log.
	NotAppended bool   `json:"not_appended,omitempty"`
	Err         *Error `json:"err,omitempty"`
	// TaskIDs are the IDs given to submitted tasks, in submission order.
	TaskIDs []string `json:"task_ids,omitempty"`
	// Replayed: the submit's request ID had already been applied; TaskIDs
	// are the original submit's and nothing changed.
	Replayed  bool             `json:"replayed,omitempty"`
	Decisions []DecisionResult `json:"decisions,omitempty"`
	// Reports are the verdicts of a reports batch's items, in order.
	Reports []ReportResult `json:"reports,omitempty"`
	// Changes are the effects on machines, in the order they happened.
	Changes []Change `json:"changes,omitempty"`
	// Transitions are the tasks' changes of state, in the order they
	// happened (transitions.go). Every peer derives them when it applies
	// the entry, so they are not encoded with a result (which keeps the
	// results golden_test.go pins).
	Transitions []Transition `json:"-"`
	// Forgotten are the records of the tasks a forget_tasks removed
	// (retention.go), for the peers' history stores; derived like
	// Transitions, never encoded.
	Forgotten []Task `json:"-"`
	// Notes explain accepted commands whose parts were ignored (e.g. a late
	// checkpoint for a task that already runs elsewhere).
	Notes []string `json:"notes,omitempty"`
}

// Applied says the command was applied (not skipped, not rejected).
func (r *Result) Applied() bool { return !r.Skipped && r.Err == nil }

// AcceptedDecisions counts the decisions of a batch that were applied.
func (r *Result) AcceptedDecisions() int {
	n := 0
	for _, d := range r.Decisions {
		if d.Err == nil {
			n++
		}
	}
	return n
}

// Apply applies the log entry data at index. An index at or below
// AppliedIndex is a no-op (Result.Skipped). Otherwise the index is recorded
// whatever happens next, and the command is decoded, validated against the
// current state and, only if valid, applied. The signature rule
// (sign.go) comes first: a signed command must verify against its peer's
// key, and an organisation that signs has its unsigned commands refused
// (CodeBadSignature). A rejected command leaves the
// state (and Hash) unchanged and returns Result.Err with a stable Code.
// Apply never panics on any input.
func (l *Ledger) Apply(index uint64, data []byte) Result {
	if index <= l.applied {
		return Result{Index: index, Skipped: true}
	}
	l.applied = index
	res := Result{Index: index}
	c, err := DecodeCommand(data)
	if err != nil {
		res.Err = err.(*Error)
		return res
	}
	res.Kind = c.Kind()
	if e := l.authenticate(&c); e != nil {
		return Result{Index: index, Kind: res.Kind, Err: e}
	}
	if e := l.apply(index, &c, &res); e != nil {
		return Result{Index: index, Kind: res.Kind, Err: e}
	}
	if !res.Replayed {
		l.markSigning(&c)
	}
	return res
}

// apply applies c's body at index (its check, then the change the check
// returned), results beyond the error going to res.
func (l *Ledger) apply(index uint64, c *Command, res *Result) *Error {
	do, err := l.check(c)
	if err != nil {
		return err
	}
	l.startStability(c)
	do(index, res)
	l.syncQueue(res)
	l.syncGangs(res)
	return nil
}

func (l *Ledger) check(c *Command) (change, *Error) {
	b := c.Body()
	if b == nil {
		return nil, errf(CodeMalformed, "a command carries exactly one body")
	}
	return b.check(l, c)
}

// Check is Apply's dry run: it says whether Apply would reject c in the
// current state, with the same error (code and message), and changes
// nothing. It runs every check Apply runs before it mutates (the version,
// the command's shape, the acting peer registered for the acting
// organisation, the body's preconditions against the state), through the
// same code. The items of a batch (decisions, reports) are judged one by
// one when the batch applies; Check judges a batch's envelope and shape.
//
// The leader calls it before appending a proposal, so that a command the
// ledger would reject never reaches the log. The state may change between
// Check and Apply (the entries ahead of it in the log): Apply checks again,
// and a command Check passed may still be rejected there.
func (l *Ledger) Check(c *Command) *Error {
	if err := checkVersion(c, "applies"); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	// The signature as Apply judges it, so a forged or unsigned command
	// of a signing organisation never reaches the log either.
	if err := l.authenticate(c); err != nil {
		return err
	}
	_, err := l.check(c)
	return err
}
