package ledger

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/coopgrid/coopgrid/policy"
)

// gen proposes random commands against the current state of a ledger:
// mostly plausible ones (what peers and the leader would send), some with
// wrong identities, dangling references or corrupted bytes.
type gen struct {
	r   *rand.Rand
	l   *Ledger
	now int64
	pol policy.Policy
	// views keeps recent policy views, to decide on a stale one.
	views []viewAt
	// sched: the first registration fixes scheduling settings, and the
	// leader mostly sends schedule triggers (schedule.go).
	sched bool
}

type viewAt struct {
	s  *policy.State
	vm *ViewMap
}

var orgPool = []string{"uni-a", "uni-b", "uni-c", "uni-d", "lab.e"}

func (g *gen) registered() []OrgInfo { return g.l.Orgs() }

func (g *gen) pick(n int) int { return g.r.IntN(n) }

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

// actor is a registered organisation (or, rarely, an unregistered one).
func (g *gen) actor() string {
	os := g.registered()
	if len(os) == 0 || g.chance(0.03) {
		return orgPool[g.pick(len(orgPool))]
	}
	return os[g.pick(len(os))].Name
}

func (g *gen) env(org string) Command {
	c := Command{V: CommandVersion, Org: org, Peer: peerOf(org), AtMs: g.now}
	if g.chance(0.03) {
		c.Peer = peerOf(orgPool[g.pick(len(orgPool))])
	}
	return c
}

func (g *gen) machineID() (Machine, bool) {
	ms := g.l.Machines()
	if len(ms) == 0 || g.chance(0.03) {
		return Machine{ID: g.actor() + "/m" + fmt.Sprint(g.pick(9)), Org: g.actor()}, false
	}
	return ms[g.pick(len(ms))], true
}

func (g *gen) taskOf(states ...TaskState) (Task, bool) {
	ts := g.l.Tasks(TaskFilter{States: states})
	if len(ts) == 0 || g.chance(0.03) {
		return Task{ID: g.actor() + "-" + fmt.Sprint(1+g.pick(40)), Org: g.actor(), Machine: "uni-a/m1"}, false
	}
	return ts[g.pick(len(ts))], true
}

func (g *gen) machineSpecs(n int) []MachineSpec {
	out := make([]MachineSpec, n)
	for i := range out {
		out[i] = MachineSpec{Name: "m" + fmt.Sprint(i), MFLOPS: 500 + int64(g.pick(3000)), BusyMilliW: 50_000 + int64(g.pick(200_000))}
		if g.chance(0.3) {
			out[i].IdleMilliW = int64(g.pick(30_000))
		}
	}
	return out
}

func (g *gen) command() Command {
	g.now += int64(g.pick(3000))
	switch w := g.pick(100); {
	case w < 4:
		org := orgPool[g.pick(len(orgPool))]
		c := g.env(org)
		c.RegisterOrg = &RegisterOrg{LimitMilliW: int64(g.pick(1_000_000)), Machines: g.machineSpecs(g.pick(4))}
		if g.sched && len(g.registered()) == 0 {
			c.RegisterOrg.Rules = &Rules{Executors: ExecutorsSimulated, Scheduling: DefaultScheduling()}
		}
		return c
	case w < 7:
		org := g.actor()
		c := g.env(org)
		c.AddMachine = &AddMachine{Machine: g.machineSpecs(1)[0]}
		c.AddMachine.Machine.Name = "m" + fmt.Sprint(g.pick(8))
		return c
	case w < 9:
		m, _ := g.machineID()
		c := g.env(m.Org)
		c.RemoveMachine = &RemoveMachine{Machine: m.ID}
		return c
	case w < 13:
		org := g.actor()
		c := g.env(org)
		lim := int64(g.pick(800_000))
		if o, ok := g.l.Org(org); ok && g.chance(0.7) {
			lim = o.PIMilliW + int64(g.pick(400_000)) - 50_000
		}
		c.SetLimit = &SetLimit{LimitMilliW: max(lim, 0)}
		return c
	case w < 22:
		c := g.env(g.actor())
		c.SubmitTasks = &SubmitTasks{}
		for range 1 + g.pick(4) {
			c.SubmitTasks.Tasks = append(c.SubmitTasks.Tasks, TaskSpec{SizeMFlop: 1 + int64(g.pick(50_000)), Spec: Spec{Argv: []string{"sim"}, Checkpointable: g.chance(0.5)}})
		}
		return c
	case w < 25:
		t, _ := g.taskOf()
		org := t.Org
		if g.chance(0.1) {
			org = g.actor()
		}
		c := g.env(org)
		c.CancelTask = &CancelTask{Task: t.ID}
		return c
	case w < 45:
		return g.decisions()
	case w < 58:
		t, _ := g.taskOf(TaskAssigned)
		c := g.env(ownerOf(t.Machine))
		c.TaskStarted = &TaskStarted{Task: t.ID, Machine: t.Machine}
		// What the run starts from: nothing said, from zero (dropping any
		// checkpoint), or the recorded checkpoint (sometimes misreported).
		switch k := g.pick(4); {
		case k == 1:
			c.TaskStarted.FromZero = true
		case k >= 2 && t.Checkpoint != nil:
			c.TaskStarted.FromCheckpoint = t.Checkpoint.Hash
			c.TaskStarted.RestoredProgressMFlop = t.Checkpoint.ProgressMFlop
			if k == 3 && g.chance(0.3) {
				c.TaskStarted.RestoredProgressMFlop++
			}
		}
		return c
	case w < 66:
		var ps []PendingStop
		for _, o := range g.registered() {
			ps = append(ps, g.l.PendingStops(o.Name)...)
		}
		p := PendingStop{Machine: "uni-a/m0", Task: "uni-a-1"}
		if len(ps) > 0 && !g.chance(0.05) {
			p = ps[g.pick(len(ps))]
		}
		c := g.env(ownerOf(p.Machine))
		c.TaskStopped = &TaskStopped{Task: p.Task, Machine: p.Machine, EnergyMilliJ: int64(g.pick(1_000_000)), Source: EnergyRAPL}
		if g.chance(0.5) {
			c.TaskStopped.Checkpoint = &CheckpointData{Hash: "h" + fmt.Sprint(g.pick(1000)), ProgressMFlop: int64(g.pick(30_000)), Holders: []string{c.Peer}}
		}
		return c
	case w < 80:
		t, _ := g.taskOf(TaskRunning, TaskAssigned)
		c := g.env(ownerOf(t.Machine))
		c.TaskEnded = &TaskEnded{Task: t.ID, Machine: t.Machine, Failed: g.chance(0.2), EnergyMilliJ: int64(g.pick(2_000_000)), Source: EnergySimulated}
		if t.State == TaskAssigned && g.chance(0.7) {
			c.TaskEnded.Failed, c.TaskEnded.EnergyMilliJ = true, 0
		}
		return c
	case w < 84:
		m, _ := g.machineID()
		c := g.env(m.Org)
		c.Heartbeat = &Heartbeat{Machine: m.ID}
		return c
	case w < 88:
		m, _ := g.machineID()
		c := g.env(g.actor())
		c.MachineLost = &MachineLostCmd{Machine: m.ID}
		return c
	default:
		t, _ := g.taskOf(TaskRunning)
		c := g.env(ownerOf(t.Machine))
		p := t.SizeMFlop - t.RemainingMFlop + int64(g.pick(int(max(t.RemainingMFlop, 1))))
		c.Checkpoint = &CheckpointRecorded{Task: t.ID, Machine: t.Machine, Checkpoint: CheckpointData{Hash: "c" + fmt.Sprint(g.pick(1000)), SizeBytes: int64(g.pick(1 << 20)), ProgressMFlop: p, Holders: []string{c.Peer}}}
		return c
	}
}

func ownerOf(machine string) string {
	for i := 0; i < len(machine); i++ {
		if machine[i] == '/' {
			return machine[:i]
		}
	}
	return "uni-a"
}

// decisions is a scheduling pass: by EHOSEP on a fresh view, by EHOSEP on
// a view several steps old, or made up.
func (g *gen) decisions() Command {
	leader := g.actor()
	if g.sched && g.chance(0.8) {
		// A trigger now, or (rarely) before the last one.
		c := g.env(leader)
		if g.chance(0.05) {
			c.AtMs = g.l.ScheduledAtMs() - 1 - int64(g.pick(1000))
		}
		c.Schedule = &Schedule{}
		return c
	}
	s, vm := g.l.PolicyView(g.now, 300)
	g.views = append(g.views, viewAt{s, vm})
	if len(g.views) > 30 {
		g.views = g.views[1:]
	}
	switch w := g.pick(10); {
	case w < 5 || w < 8 && len(g.views) > 1:
		if w >= 5 {
			v := g.views[g.pick(len(g.views)/2+1)]
			s, vm = v.s, v.vm
		}
		ds, err := g.pol.Schedule(s)
		if err != nil {
			panic(fmt.Sprintf("policy on a ledger view: %v", err))
		}
		c, err := vm.DecisionsCommand(leader, peerOf(leader), g.now, ds)
		if err != nil {
			panic(fmt.Sprintf("decisions command: %v", err))
		}
		return c
	default:
		c := g.env(leader)
		c.Decisions = &Decisions{}
		for range 1 + g.pick(5) {
			t, _ := g.taskOf(TaskQueued)
			m, _ := g.machineID()
			d := Decision{Kind: DecideAllocate, Task: t.ID, Machine: m.ID}
			if m.Task != "" && g.chance(0.7) || g.chance(0.1) {
				d.Kind, d.Victim = DecidePreempt, m.Task
			}
			c.Decisions.Decisions = append(c.Decisions.Decisions, d)
		}
		return c
	}
}

// encode encodes c, occasionally corrupting the bytes.
func (g *gen) encode(c Command) []byte {
	b, err := EncodeCommand(c)
	if err != nil {
		// A shape the encoder refuses still goes to the log, raw, as a
		// buggy or hostile peer would send it.
		b = mustJSON(c)
	}
	switch g.pick(100) {
	case 0:
		return b[:g.pick(len(b))]
	case 1:
		b = bytes.Clone(b)
		b[g.pick(len(b))] ^= byte(1 + g.pick(255))
	case 2:
		return bytes.Replace(b, []byte(`"v":1`), []byte(`"v":7`), 1)
	}
	return b
}

// TestRandomSequencesKeepInvariants applies thousands of random commands
// per seed, checking after every one the invariants, that a rejected
// command leaves the hash unchanged, and every few hundred steps that a
// snapshot restores to the same hash. It then replays the log into a fresh
// ledger and checks that the hash agrees at every index.
func TestRandomSequencesKeepInvariants(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 600
	}
	pol, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	accepted := map[Kind]int{}
	rejected := map[Code]int{}
	decisionCodes := map[Code]int{}
	for _, seed := range []uint64{1, 2, 3} {
		f := newFed(t)
		g := &gen{r: rand.New(rand.NewPCG(seed, 99)), l: f.l, now: 1_000_000, pol: pol}
		hashes := make([]string, 0, steps)
		before := f.l.Hash()
		for i := 0; i < steps; i++ {
			r := f.raw(g.encode(g.command()))
			after := f.l.Hash()
			if r.Applied() {
				accepted[r.Kind]++
			} else {
				rejected[r.Err.Code]++
				if after != before {
					t.Fatalf("seed %d step %d: rejected %s (%v) changed the hash", seed, i, r.Kind, r.Err)
				}
			}
			for _, d := range r.Decisions {
				if d.Err != nil {
					decisionCodes[d.Err.Code]++
				} else {
					decisionCodes[""]++
				}
			}
			hashes = append(hashes, after)
			before = after
			if i%250 == 249 {
				nl := New()
				if err := nl.Restore(bytes.NewReader(snapshotOf(t, f.l))); err != nil {
					t.Fatalf("seed %d step %d: restore: %v", seed, i, err)
				}
				if nl.Hash() != after || nl.AppliedIndex() != f.l.AppliedIndex() {
					t.Fatalf("seed %d step %d: restored hash %s, want %s", seed, i, nl.Hash(), after)
				}
			}
		}
		replay := New()
		for i, b := range f.log {
			replay.Apply(uint64(i+1), b)
			if h := replay.Hash(); h != hashes[i] {
				t.Fatalf("seed %d: replay diverges at index %d", seed, i+1)
			}
		}
		o := f.l.Orgs()
		t.Logf("seed %d: %d orgs, %d machines, %d tasks", seed, len(o), len(f.l.Machines()), len(f.l.Tasks(TaskFilter{})))
	}
	t.Logf("accepted %v", accepted)
	t.Logf("rejected %v", rejected)
	t.Logf("decisions %v", decisionCodes)
	for _, k := range allKinds {
		if accepted[k] == 0 {
			t.Errorf("the random sequences never applied a %s", k)
		}
	}
	for _, c := range []Code{CodeMalformed, CodeBadVersion, CodeNotOwner, CodeUnknownTask, CodeBadState, CodeExists} {
		if rejected[c] == 0 {
			t.Errorf("the random sequences never produced a %s rejection", c)
		}
	}
	for _, c := range []Code{"", CodeStale, CodeMachineBusy, CodeLimitExceeded} {
		if decisionCodes[c] == 0 {
			t.Errorf("the random sequences never produced a decision with code %q", c)
		}
	}
}
