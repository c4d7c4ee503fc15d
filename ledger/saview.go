package ledger

import "github.com/coopgrid/coopgrid/policy"

// SAView is what SA_s predicts on (policy.SAChooseLive; docs/POLICY.md,
// "SA live"): PolicyView's state at nowMs (its queue and waiting gangs are
// what is ahead) and the federation's job policy.
func (l *Ledger) SAView(nowMs int64) (*policy.State, *ViewMap, string) {
	s, vm := l.PolicyView(nowMs, 0)
	return s, vm, l.JobPolicy().Policy
}

// SATask is the task ts of organisation org would be in the view vm, under
// the ID id (one the view does not hold): what SA_s predicts for; false
// when org is not in the view.
func (vm *ViewMap) SATask(id, org string, ts TaskSpec) (policy.Task, bool) {
	idx := vm.orgIndex()
	if _, ok := idx[org]; !ok {
		return policy.Task{}, false
	}
	t := Task{ID: id, Org: org, SizeMFlop: ts.SizeMFlop, RemainingMFlop: ts.SizeMFlop, Spec: ts.Spec}
	return policyTask(&t, idx), true
}

func (vm *ViewMap) orgIndex() map[string]int {
	idx := make(map[string]int, len(vm.Orgs))
	for i, o := range vm.Orgs {
		idx[o] = i
	}
	return idx
}
