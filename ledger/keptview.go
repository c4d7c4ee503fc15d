package ledger

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/coopgrid/coopgrid/policy"
)

// keptMachines is the machines of the policy view as the passes that read
// the kept queue see them (issue 22), kept between passes: the machines
// in the view, their order by ID, and the policy.Federation prepared from
// them, so that a pass neither lists and sorts every machine nor
// re-validates and re-derives them (quotas, the orders by draw and by
// energy). Like the kept queue it is derived from the replicated state
// alone and is a cache, never an input: every change of a machine that
// the view shows (a machine registered or removed, up or lost, drained or
// not, reclaimed or given back, a corrected effective speed, its owner's
// load, an organisation registered) drops it (machinesChanged), the next
// kept pass builds it again, and a restored ledger starts without one.
// CheckInvariants compares it with a fresh build, so a change that forgot
// to drop it fails the ledger's tests.
type keptMachines struct {
	nOrgs int
	// ids are the view's machines (ViewMap.Machines): up, not reclaimed,
	// not drained, by ID; mach their records and ms the policy's view of
	// them (MTBFMs refreshed at every pass: it grows with the time).
	ids  []string
	mach []*Machine
	ms   []policy.Machine
	// fed is prepared from ms; nil when policy.NewFederation refuses them
	// (the pass then validates the machines and refuses them alike).
	fed *policy.Federation
	// drained are the available drained machines, by ID, whose tasks
	// lower their organisations' limits in the view (drainedInView).
	drained []*Machine
}

// keptCache holds the kept machines: nil until the next kept pass after
// any change of a machine (machinesChanged). Its lock: a kept pass may
// build them under the state's read lock (Placeable), beside other
// readers (CheckInvariants).
type keptCache struct {
	mu sync.Mutex
	m  *keptMachines
}

// machinesChanged drops the kept machines: a machine the view shows, or
// the organisations that own them, changed.
func (l *Ledger) machinesChanged() {
	l.kept.mu.Lock()
	l.kept.m = nil
	l.kept.mu.Unlock()
}

// buildKeptMachines derives the kept machines from the state, as
// policyView lists them.
func (l *Ledger) buildKeptMachines(orgIdx map[string]int) *keptMachines {
	k := &keptMachines{nOrgs: len(l.order)}
	for _, id := range sortedKeys(l.machines) {
		m := l.machines[id]
		if !m.available() {
			continue
		}
		if m.Drained {
			k.drained = append(k.drained, m)
			continue
		}
		k.ids = append(k.ids, id)
		k.mach = append(k.mach, m)
		k.ms = append(k.ms, m.policyMachine(orgIdx[m.Org]))
	}
	k.fed, _ = policy.NewFederation(len(l.order), k.ms)
	return k
}

// keptOrgIndex is the organisations' indices in the view: the kept
// queue's map when it knows every organisation (it is kept in step with
// the registrations), else a new one.
func (l *Ledger) keptOrgIndex() map[string]int {
	if k := l.queue; k != nil && len(k.orgIdx) == len(l.order) {
		return k.orgIdx
	}
	orgIdx := make(map[string]int, len(l.order))
	for i, n := range l.order {
		orgIdx[n] = i
	}
	return orgIdx
}

// keptView is policyView for a pass that runs before the ledger changes
// (schedulingPass with kept): the same State, with the kept queue q (nil:
// the queued tasks listed) and the kept machines, which it shares with the
// ledger (State.Machines, State.Federation and ViewMap.Machines): valid
// only until the ledger changes, and (for the MTBFs it refreshes) until
// the next kept view: the leader's loop takes one at a time. Apart from its running tasks and the
// organisations it costs no work per machine unless a machine changed
// since the last kept pass (or, when the federation tracks stability,
// one refresh of each machine's MTBF).
func (l *Ledger) keptView(nowMs int64, checkpointBlockSeconds float64, q *policy.Queue) (*policy.State, *ViewMap) {
	orgIdx := l.keptOrgIndex()
	l.kept.mu.Lock()
	k := l.kept.m
	if k == nil || k.nOrgs != len(l.order) {
		k = l.buildKeptMachines(orgIdx)
		l.kept.m = k
	}
	if l.stability != nil {
		for i, m := range k.mach {
			k.ms[i].MTBFMs = l.stabilityOf(m, max(nowMs, 0)).MTBFMs
		}
	}
	l.kept.mu.Unlock()
	s := &policy.State{
		Orgs:                   make([]policy.Org, len(l.order)),
		Machines:               k.ms,
		Federation:             k.fed,
		CheckpointBlockSeconds: checkpointBlockSeconds,
		NowMs:                  max(nowMs, 0),
	}
	for i, n := range l.order {
		s.Orgs[i] = policy.Org{Name: n, LimitMilliW: l.orgs[n].LimitMilliW}
	}
	for _, m := range k.drained {
		drainedInView(s, m, l.tasks, orgIdx)
	}
	vm := &ViewMap{Index: l.applied, NowMs: nowMs, Orgs: append([]string(nil), l.order...), Machines: k.ids}
	l.viewQueued(s, q, orgIdx)
	for i, m := range k.mach {
		if m.Task == "" {
			continue
		}
		s.Running = append(s.Running, l.viewRunning(l.tasks[m.Task], m.ID, i, nowMs, orgIdx))
		for _, tid := range m.Also {
			s.Running = append(s.Running, l.viewRunning(l.tasks[tid], m.ID, i, nowMs, orgIdx))
		}
	}
	l.viewGangs(s, orgIdx)
	return s, vm
}

// checkKeptMachines is CheckInvariants' check of the kept machines: they
// are what a build from the state gives now (MTBFs aside: a pass
// refreshes them).
func (l *Ledger) checkKeptMachines(fail func(string, ...any)) {
	l.kept.mu.Lock()
	defer l.kept.mu.Unlock()
	k := l.kept.m
	if k == nil || k.nOrgs != len(l.order) {
		return
	}
	orgIdx := make(map[string]int, len(l.order))
	for i, n := range l.order {
		orgIdx[n] = i
	}
	want := l.buildKeptMachines(orgIdx)
	if !reflect.DeepEqual(k.ids, want.ids) {
		fail("kept machines: %v, the view has %v", k.ids, want.ids)
		return
	}
	for i := range k.ms {
		got := k.ms[i]
		got.MTBFMs = 0
		if !reflect.DeepEqual(got, want.ms[i]) || k.mach[i] != want.mach[i] {
			fail("kept machines: machine %s kept as %s, the view has %s", k.ids[i], fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want.ms[i]))
			return
		}
	}
	if !reflect.DeepEqual(k.drained, want.drained) {
		fail("kept machines: %d drained kept, %d in the view", len(k.drained), len(want.drained))
	}
	if (k.fed == nil) != (want.fed == nil) {
		fail("kept machines: federation prepared %t, from the state %t", k.fed != nil, want.fed != nil)
	}
}
