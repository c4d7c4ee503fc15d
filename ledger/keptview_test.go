package ledger

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// machineChange is one of the commands that change a machine the kept
// view shows, beside those the random generator makes (registrations,
// removals, heartbeats, losses, and the ends of runs that correct a
// machine's effective speed): a drain, an owner's load, a reclaim, and an
// opportunistic machine to reclaim. Version 3, so the federation tracks
// stability (MTBFs in the view) from the first one on.
func machineChange(g *gen) Command {
	m, _ := g.machineID()
	c := g.env(m.Org)
	c.V = MaxCommandVersion()
	switch g.pick(4) {
	case 0:
		c.DrainMachine = &DrainMachine{Machine: m.ID, Drained: g.chance(0.5)}
	case 1:
		c.MachineLoad = &MachineLoad{Machine: m.ID, LoadPermille: int64(g.pick(3)) * 400}
	case 2:
		c.ReclaimMachine = &ReclaimMachine{Machine: m.ID, Reclaimed: g.chance(0.5)}
	default:
		c = g.env(g.actor())
		c.V = MaxCommandVersion()
		spec := g.machineSpecs(1)[0]
		spec.Name, spec.Opportunistic = "o"+fmt.Sprint(g.pick(4)), true
		c.AddMachine = &AddMachine{Machine: spec}
	}
	return c
}

// TestKeptMachinesAgreeOverRandomSequences: over random sequences of
// commands, machine changes of every kind among them, the pass on the kept
// view (kept queue and kept machines: what Apply runs) decides what the
// pass on a fresh copy of the view decides (checkKeptPass), the kept
// machines are what a build from the state gives (CheckInvariants, after
// every command), the kept view shows the same machines as the fresh one,
// and they are kept between passes while no machine changes. A restored
// ledger starts without them and decides as the original.
func TestKeptMachinesAgreeOverRandomSequences(t *testing.T) {
	steps := 1500
	if testing.Short() {
		steps = 400
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	applied := map[Kind]int{}
	reused, corrected := 0, 0
	for _, seed := range []uint64{11, 12, 13} {
		f := newFed(t)
		g := &gen{r: rand.New(rand.NewPCG(seed, 23)), l: f.l, now: 1_000_000, pol: pol, sched: true}
		var last *keptMachines
		for i := range steps {
			c := g.command()
			if g.chance(0.2) {
				c = machineChange(g)
			}
			if r := f.raw(g.encode(c)); r.Applied() {
				applied[r.Kind]++
			}
			for _, m := range f.l.machines {
				if m.EffectiveMFLOPS() != m.MFLOPS {
					corrected++
					break
				}
			}
			if i%3 != 0 {
				continue
			}
			if last != nil && f.l.kept.m == last {
				reused++
			}
			checkKeptPass(t, f.l, g.now)
			checkKeptViewMachines(t, f.l, g.now)
			last = f.l.kept.m
			if i%100 == 99 {
				checkRestoredKeptPass(t, f.l, g.now)
			}
		}
	}
	t.Logf("applied %v; kept machines reused by %d passes; %d steps with a corrected speed", applied, reused, corrected)
	for _, k := range []Kind{KindDrainMachine, KindMachineLoad, KindReclaimMachine, KindAddMachine, KindRemoveMachine, KindHeartbeat, KindMachineLost, KindRegisterOrg, KindSchedule} {
		if applied[k] == 0 {
			t.Errorf("the sequences never applied a %s: they prove nothing about it", k)
		}
	}
	if reused == 0 || corrected == 0 {
		t.Errorf("kept machines reused %d times, %d steps with a corrected speed: the sequences prove nothing", reused, corrected)
	}
}

// checkKeptViewMachines: the kept view shows the machines, MTBFs
// included, and the organisations' limits that the fresh view shows, with
// a prepared federation.
func checkKeptViewMachines(t *testing.T, l *Ledger, nowMs int64) {
	t.Helper()
	if _, ok := l.SchedulingSettings(); !ok {
		return
	}
	nowMs = max(nowMs, l.ScheduledAtMs())
	fresh, fvm := l.PolicyView(nowMs, 300)
	kept, kvm := l.keptView(nowMs, 300, nil)
	if !reflect.DeepEqual(fresh.Machines, kept.Machines) || !reflect.DeepEqual(fvm.Machines, kvm.Machines) {
		t.Fatalf("at %d ms: the kept view's machines %+v, the fresh view's %+v", nowMs, kept.Machines, fresh.Machines)
	}
	if !reflect.DeepEqual(fresh.Orgs, kept.Orgs) || !reflect.DeepEqual(fresh.Running, kept.Running) || !reflect.DeepEqual(fresh.Queued, kept.Queued) {
		t.Fatalf("at %d ms: the kept view differs from the fresh one beside its machines", nowMs)
	}
	if len(kept.Machines) > 0 && kept.Federation == nil {
		t.Fatalf("at %d ms: the kept view of %d machines has no prepared federation", nowMs, len(kept.Machines))
	}
}

// checkRestoredKeptPass: a ledger restored from l's snapshot has no kept
// machines, and its kept pass (built anew) decides what l's does.
func checkRestoredKeptPass(t *testing.T, l *Ledger, nowMs int64) {
	t.Helper()
	if _, ok := l.SchedulingSettings(); !ok {
		return
	}
	nl := New()
	if err := nl.Restore(bytes.NewReader(snapshotOf(t, l))); err != nil {
		t.Fatal(err)
	}
	if nl.kept.m != nil {
		t.Fatal("a restored ledger has kept machines: they are not in the snapshot")
	}
	nowMs = max(nowMs, l.ScheduledAtMs())
	decide := func(l *Ledger) []Decision {
		p, err := l.schedulingPass(nowMs, true)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := p.Decide()
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	want := decide(l)
	if got := decide(nl); !reflect.DeepEqual(got, want) {
		t.Fatalf("at %d ms: the restored ledger's kept pass decides %+v, the original's %+v", nowMs, got, want)
	}
	if nl.kept.m == nil {
		t.Fatal("the restored ledger's kept pass built no kept machines")
	}
	if err := nl.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
