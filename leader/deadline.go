package leader

import (
	"slices"

	"github.com/coopgrid/coopgrid/ledger"
	"github.com/coopgrid/coopgrid/p2p"
)

// CodeDeadlineUnmeetable: a submission's soft-deadline task cannot be
// finished by its deadline on any machine its organisation may use (seed
// 004's refusal, docs/POLICY.md §9). Not appended: nothing is queued.
const CodeDeadlineUnmeetable = "deadline_unmeetable"

// admitDeadlines is admission of a submission's soft-deadline tasks,
// judged together (ledger.CheckDeadlines: earliest deadline first, each
// behind the work the others packed before it left; docs/POLICY.md §9,
// "Admission"), on the committed state at the leader's clock. A
// resend of a submission the ledger remembers (same request ID) is not
// judged again: it was admitted, and the ledger answers it with the
// original task IDs however late it comes.
func (l *Leader) admitDeadlines(c ledger.Command, state *ledger.Ledger) error {
	b := c.SubmitTasks
	// Only a submission with a soft-deadline task reads the clock (a
	// test's clock hook counts on the scheduling pass being its reader).
	if !slices.ContainsFunc(b.Tasks, func(ts ledger.TaskSpec) bool { return ts.Spec.Class == ledger.ClassSoftDeadline }) {
		return nil
	}
	if b.RequestID != "" {
		if _, ok := state.SubmitRequest(c.Org, b.RequestID); ok {
			return nil
		}
	}
	if r := state.CheckDeadlines(c.Org, l.cfg.Now().UnixMilli(), b.Tasks); r != nil {
		return p2p.Errorf(CodeDeadlineUnmeetable, "%v", r)
	}
	return nil
}
