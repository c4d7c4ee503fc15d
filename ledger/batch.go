package ledger

import "reflect"

// Group commit of the executing peers' reports (issue 9). A peer running
// many short tasks reports two events per task (start and end); one log
// entry per report costs one Raft round trip, one fsync and one forwarded
// request each. A Reports command carries many independent reports of one
// organisation in one entry, applied with the decisions rule: item by item,
// each validated against the state the previous items left, each with its
// own verdict. A rejected item changes nothing and does not affect the
// others.

// MaxReportsPerCommand bounds the items of one Reports command.
const MaxReportsPerCommand = 10_000

// KindReports is a batch of reports.
const KindReports Kind = "reports"

// Reports is a batch of the acting organisation's reports on runs of its
// machines. Each item carries exactly one of the report bodies; it is
// applied as if it were a command of its own with the batch's envelope
// (organisation, peer, time).
type Reports struct {
	Items []Report `json:"items"`
}

// Report is one item of a Reports batch: exactly one body. Its fields are
// the kinds a batch may carry, each of the same type as its field in
// Command (body.go).
type Report struct {
	TaskStarted *TaskStarted        `json:"task_started,omitempty"`
	TaskStopped *TaskStopped        `json:"task_stopped,omitempty"`
	TaskEnded   *TaskEnded          `json:"task_ended,omitempty"`
	Checkpoint  *CheckpointRecorded `json:"checkpoint,omitempty"`
}

// ReportResult is the fate of one item of a Reports batch.
type ReportResult struct {
	Kind Kind `json:"kind,omitempty"`
	// Err is nil when the item was applied.
	Err *Error `json:"err,omitempty"`
	// Notes explain an applied item whose parts were ignored.
	Notes []string `json:"notes,omitempty"`
}

// Command returns the single command the item stands for, with envelope's
// organisation, peer and time. Every body the item carries is carried over,
// so that an item with none or several is a command with none or several.
func (r Report) Command(envelope Command) Command {
	c := Command{V: envelope.V, Org: envelope.Org, Peer: envelope.Peer, AtMs: envelope.AtMs}
	rv, cv := reflect.ValueOf(&r).Elem(), reflect.ValueOf(&c).Elem()
	for _, i := range reportBodies.index {
		if f := rv.Field(i); !f.IsNil() {
			commandBodies.set(cv, f.Interface().(Body))
		}
	}
	return c
}

// ReportOf is the Report carrying c's body, ok false when c is not one of
// the kinds a Reports batch carries.
func ReportOf(c Command) (Report, bool) {
	var r Report
	b := c.Body()
	if b == nil {
		return r, false
	}
	return r, reportBodies.set(reflect.ValueOf(&r).Elem(), b)
}

// AcceptedReports counts the items of a Reports batch that were applied.
func (r *Result) AcceptedReports() int {
	n := 0
	for _, it := range r.Reports {
		if it.Err == nil {
			n++
		}
	}
	return n
}

// ItemResult is the result a single command would have had for item i of
// an applied Reports batch: the batch's index, the item's kind, verdict
// and notes. An envelope error of the batch is every item's error.
func (r *Result) ItemResult(i int) Result {
	out := Result{Index: r.Index, Skipped: r.Skipped, Err: r.Err}
	if r.Err == nil && i >= 0 && i < len(r.Reports) {
		it := r.Reports[i]
		out.Kind, out.Err, out.Notes = it.Kind, it.Err, it.Notes
	}
	return out
}

func (*Reports) Kind() Kind { return KindReports }

// validate checks the batch's size only: a malformed item is rejected on
// its own by Apply, as a malformed decision is, so that one bad report does
// not sink the others.
func (b *Reports) validate() *Error {
	if n := len(b.Items); n == 0 || n > MaxReportsPerCommand {
		return errf(CodeMalformed, "%d reports: want 1 to %d", n, MaxReportsPerCommand)
	}
	return nil
}

// wakesScheduler: a batch of reports wakes the scheduler as its accepted
// items would have, one by one.
func (*Reports) wakesScheduler(res *Result) bool {
	for i := range res.Reports {
		if item := res.ItemResult(i); WakesScheduler(&item) {
			return true
		}
	}
	return false
}

// check of a batch is its envelope only; its change applies the batch
// item by item. Each item goes through the same shape check and handler as
// the single command it stands for, on an item-local Result: handlers
// validate completely before they mutate, so a rejected item leaves the
// state as the previous items left it.
func (b *Reports) check(l *Ledger, c *Command) (change, *Error) {
	if _, err := l.actor(c); err != nil {
		return nil, err
	}
	return func(index uint64, res *Result) {
		res.Reports = make([]ReportResult, len(b.Items))
		for i, it := range b.Items {
			res.Reports[i] = l.applyReport(index, it.Command(*c), res)
		}
	}, nil
}

// applyReport applies one item of a batch, sub being the command it stands
// for; what it changes and notes is appended to the batch's res.
func (l *Ledger) applyReport(index uint64, sub Command, res *Result) ReportResult {
	body := sub.Body()
	if body == nil {
		return ReportResult{Err: errf(CodeMalformed, "a report carries exactly one of %s", reportBodies.kindList())}
	}
	rr := ReportResult{Kind: body.Kind()}
	if err := sub.validate(); err != nil {
		rr.Err = err
		return rr
	}
	var ir Result
	if err := l.apply(index, &sub, &ir); err != nil {
		rr.Err = err
		return rr
	}
	rr.Notes = ir.Notes
	res.Changes = append(res.Changes, ir.Changes...)
	res.Transitions = append(res.Transitions, ir.Transitions...)
	res.Notes = append(res.Notes, ir.Notes...)
	return rr
}
