package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/policy"
)

// fifo is a test-only policy: queued tasks in submission order onto the
// free machine of lowest index. It ignores limits and never preempts, so a
// hand-worked schedule under it is easy to write down.
type fifo struct{}

func (fifo) Name() string { return "test-fifo" }

func (fifo) Schedule(s *policy.State) ([]policy.Decision, error) {
	q := slices.Clone(s.Queued)
	slices.SortFunc(q, func(a, b policy.Task) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	busy := make([]bool, len(s.Machines))
	for _, r := range s.Running {
		busy[r.Machine] = true
	}
	var out []policy.Decision
	m := 0
	for _, t := range q {
		for m < len(busy) && busy[m] {
			m++
		}
		if m == len(busy) {
			break
		}
		busy[m] = true
		out = append(out, policy.Decision{Kind: policy.Allocate, Task: t.ID, Org: t.Org, Machine: m})
	}
	return out, nil
}

// scripted returns fixed decisions on its first call and nothing after: a
// way to feed the simulator a chosen (possibly invalid) decision.
type scripted struct {
	first []policy.Decision
	calls *int
}

func (scripted) Name() string { return "test-scripted" }

func (p scripted) Schedule(s *policy.State) ([]policy.Decision, error) {
	*p.calls++
	if *p.calls == 1 {
		return p.first, nil
	}
	return nil, nil
}

func mustPolicy(t testing.TB, name string) policy.Policy {
	t.Helper()
	p, err := policy.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// model1 builds a Model 1 federation (seed 000 table 2; POLICY.md §6) with
// the dissertation's task mix drawn from seed: 300 tasks (U1 100, U2 80,
// U3 60, U4 60), types A/B/C in proportion 1:2:1, sizes uniform within the
// type's range. late names an organisation submitting 600 s late ("" for
// none). limitFrac is a limit as a fraction of the organisation's power
// quota (0 = the whole system's power), set as in the dissertation's
// sequences: for the late organisation only, the others at the whole
// system; with nobody late, for everyone (performance test 1).
func model1(seed uint64, late string, limitFrac float64) *scenario.Instance {
	type group struct {
		n            int
		gflops, watt float64
	}
	orgs := []struct {
		name   string
		groups []group
		tasks  int
	}{
		{"U1", []group{{16, 133.47, 220}, {8, 108, 191}}, 100},
		{"U2", []group{{12, 84.53, 99}, {8, 95.49, 113.5}}, 80},
		{"U3", []group{{6, 32.42, 134}, {6, 17.38, 118}}, 60},
		{"U4", []group{{8, 42.15, 67}}, 60},
	}
	inst := &scenario.Instance{Name: fmt.Sprintf("model1-%d", seed)}
	var system int64
	quotas := make([]int64, len(orgs))
	for i, o := range orgs {
		for _, g := range o.groups {
			for k := 0; k < g.n; k++ {
				m := policy.Machine{
					ID:         fmt.Sprintf("%s-m%02d", o.name, len(inst.Machines)),
					Owner:      i,
					MFLOPS:     int64(math.Round(g.gflops * 1000)),
					BusyMilliW: int64(math.Round(g.watt * 1000)),
				}
				inst.Machines = append(inst.Machines, m)
				system += m.BusyMilliW
				quotas[i] += m.BusyMilliW
			}
		}
	}
	for i, o := range orgs {
		lim := system
		if limitFrac > 0 && (late == "" || late == o.name) {
			lim = int64(math.Round(float64(quotas[i]) * limitFrac))
		}
		inst.Orgs = append(inst.Orgs, policy.Org{Name: o.name, LimitMilliW: lim})
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ranges := [][2]int64{{36606, 109818}, {109818, 183030}, {183030, 256242}} // GFlop
	var tasks []scenario.TaskSpec
	for i, o := range orgs {
		submit := 0.0
		if o.name == late {
			submit = 600
		}
		for k := 0; k < o.tasks; k++ {
			typ := 1 // B: half of the tasks
			switch k % 4 {
			case 0:
				typ = 0
			case 3:
				typ = 2
			}
			r := ranges[typ]
			g := r[0] + rng.Int64N(r[1]-r[0]+1)
			tasks = append(tasks, scenario.TaskSpec{
				ID: fmt.Sprintf("%s-t%03d", o.name, k), Org: i,
				SizeMFlop: g * 1000, SubmitSeconds: submit,
			})
		}
	}
	slices.SortStableFunc(tasks, func(a, b scenario.TaskSpec) int {
		switch {
		case a.SubmitSeconds < b.SubmitSeconds:
			return -1
		case a.SubmitSeconds > b.SubmitSeconds:
			return 1
		}
		return 0
	})
	inst.Tasks = tasks
	return inst
}

// randomFederation is a small random federation with random limits (each at
// least the largest draw among the organisation's own machines' draws,
// so that nothing can get stuck), random sizes and staggered submissions.
func randomFederation(seed uint64) *scenario.Instance {
	rng := rand.New(rand.NewPCG(seed, 7))
	nO := 2 + rng.IntN(4)
	inst := &scenario.Instance{Name: fmt.Sprintf("random-%d", seed)}
	maxDraw := int64(0)
	for i := 0; i < nO; i++ {
		inst.Orgs = append(inst.Orgs, policy.Org{Name: fmt.Sprintf("O%d", i)})
		for k := 0; k < 1+rng.IntN(5); k++ {
			m := policy.Machine{
				ID:         fmt.Sprintf("O%d-m%d", i, k),
				Owner:      i,
				MFLOPS:     1000 * (10 + rng.Int64N(140)),
				BusyMilliW: 1000 * (50 + rng.Int64N(200)),
			}
			maxDraw = max(maxDraw, m.BusyMilliW)
			inst.Machines = append(inst.Machines, m)
			inst.IdleMilliW = append(inst.IdleMilliW, 1000*rng.Int64N(20))
		}
	}
	for i := range inst.Orgs {
		// between one machine's worth and three
		inst.Orgs[i].LimitMilliW = maxDraw + rng.Int64N(2*maxDraw+1)
	}
	n := 10 + rng.IntN(40)
	t := 0.0
	for k := 0; k < n; k++ {
		if rng.IntN(3) == 0 {
			t += float64(rng.IntN(900))
		}
		o := rng.IntN(nO)
		inst.Tasks = append(inst.Tasks, scenario.TaskSpec{
			ID: fmt.Sprintf("t%03d", k), Org: o,
			SizeMFlop:     1000 * (1000 + rng.Int64N(200000)),
			SubmitSeconds: t,
		})
	}
	return inst
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.IsNaN(want) {
		if !math.IsNaN(got) {
			t.Errorf("%s = %v, want NaN", what, got)
		}
		return
	}
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.12g, want %.12g", what, got, want)
	}
}
