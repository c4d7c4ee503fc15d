package demo

import (
	"fmt"
	"math"
	"strings"

	"github.com/coopgrid/coopgrid/lab/scenario"
)

// The demo's workload is the dissertation's Model 1 (seed 000 §4.2, the
// same federation as examples/scenarios/model1.yaml), scaled down: every
// machine group and every task count is multiplied by --scale and rounded,
// keeping at least one of each. It is written as a scenario file and parsed
// by lab/scenario, so task sizes are drawn exactly as `peer sim` draws
// them: at --scale 1 with 4 organisations the demo's instance is Model 1's
// for the same seed, task for task.

const (
	// demoScenarioName names the generated scenario (file and instance).
	demoScenarioName = "model1-demo"
	// demoLateLimitPercent is the late organisation's power limit as a
	// percentage of its own power quota: below 100 % so that EHOSEP's
	// limits show (the dissertation's S1M1 at 80 %).
	demoLateLimitPercent = 80
	// demoLateOrg is the index of the late organisation (U1).
	demoLateOrg = 0
	// demoLateDelay is when the late organisation submits, in simulated
	// seconds (Model 1's 10 minutes).
	demoLateDelay = 600.0
	// demoCheckpointSeconds and demoTickSeconds are Model 1's checkpoint
	// block and scheduling tick, in simulated seconds.
	demoCheckpointSeconds = 300.0
	demoTickSeconds       = 30.0
)

// demoGroup is a group of identical machines; GFLOPS and watts are decimal
// strings so that the scenario parser converts them exactly.
type demoGroup struct {
	count         int
	gflops, watts string
}

// demoShape is one organisation of Model 1: its machines (table 2) and how
// many tasks of types A, B and C it submits (table 8).
type demoShape struct {
	groups []demoGroup
	mix    [3]int
}

// model1Shapes returns Model 1's four organisations, U1 to U4.
func model1Shapes() []demoShape {
	return []demoShape{
		{groups: []demoGroup{{16, "133.47", "220"}, {8, "108", "191"}}, mix: [3]int{25, 50, 25}},
		{groups: []demoGroup{{12, "84.53", "99"}, {8, "95.49", "113.5"}}, mix: [3]int{20, 40, 20}},
		{groups: []demoGroup{{6, "32.42", "134"}, {6, "17.38", "118"}}, mix: [3]int{15, 30, 15}},
		{groups: []demoGroup{{8, "42.15", "67"}}, mix: [3]int{15, 30, 15}},
	}
}

// model1Types are Model 1's task types (table 6) in GFlop.
var model1Types = [3]struct {
	name     string
	min, max int
}{{"A", 36606, 109818}, {"B", 109818, 183030}, {"C", 183030, 256242}}

// Bounds of the demo's flags. At least three peers: with two, killing the
// leader leaves one of two Raft voters, no majority, and nothing fails over.
const (
	MinOrgs  = 3
	MaxOrgs  = 16
	MinScale = 0.01
	MaxScale = 1
)

// scaled multiplies a count by s, rounding half away from zero, and keeps
// at least one of anything there was.
func scaled(n int, s float64) int {
	if n == 0 {
		return 0
	}
	return max(1, int(math.Round(float64(n)*s)))
}

// demoOrgName is the name of the i-th organisation (0-based): U1, U2, ...
func demoOrgName(i int) string { return fmt.Sprintf("U%d", i+1) }

// demoScenarioYAML writes the scaled scenario. Organisations beyond the
// fourth repeat Model 1's shapes in order (U5 like U1, and so on).
func demoScenarioYAML(orgs int, scale float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by peer demo: the EHOSEP dissertation's Model 1 (seed 000 §4.2;\n")
	fmt.Fprintf(&b, "# examples/scenarios/model1.yaml) with %d organisations, scaled by %g.\n", orgs, scale)
	fmt.Fprintf(&b, "name: %s\n", demoScenarioName)
	fmt.Fprintf(&b, "sim:\n  checkpoint: %gs\n  tick: %gs\n", demoCheckpointSeconds, demoTickSeconds)
	fmt.Fprintf(&b, "late:\n  org: %s\n  delay: %gs\n", demoOrgName(demoLateOrg), demoLateDelay)
	b.WriteString("types:\n")
	for _, t := range model1Types {
		fmt.Fprintf(&b, "  - {name: %s, gflop: [%d, %d]}\n", t.name, t.min, t.max)
	}
	b.WriteString("orgs:\n")
	shapes := model1Shapes()
	for i := range orgs {
		sh := shapes[i%len(shapes)]
		fmt.Fprintf(&b, "  - name: %s\n", demoOrgName(i))
		if i == demoLateOrg {
			fmt.Fprintf(&b, "    limit: %d%%\n", demoLateLimitPercent)
		}
		b.WriteString("    machines:\n")
		for _, g := range sh.groups {
			fmt.Fprintf(&b, "      - {count: %d, gflops: %s, watts: %s}\n", scaled(g.count, scale), g.gflops, g.watts)
		}
		fmt.Fprintf(&b, "    mix: {")
		for k, t := range model1Types {
			if k > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: %d", t.name, scaled(sh.mix[k], scale))
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// demoWorkload is the scaled scenario and its instance for one seed: the
// first organisation late with its limit at demoLateLimitPercent, the
// others at "system" (the whole federation's power), as in S1M1. The
// scenario file says so itself, so that `peer sim` on it simulates the
// same case.
type demoWorkload struct {
	yaml string
	sc   *scenario.Scenario
	inst *scenario.Instance
	late int // index of the late organisation
}

func newDemoWorkload(orgs int, scale float64, seed uint64) (*demoWorkload, error) {
	text := demoScenarioYAML(orgs, scale)
	sc, err := scenario.Parse(demoScenarioName+".yaml", []byte(text))
	if err != nil {
		return nil, fmt.Errorf("demo scenario: %w", err)
	}
	inst, err := sc.Instance(scenario.Options{}, seed)
	if err != nil {
		return nil, fmt.Errorf("demo scenario: %w", err)
	}
	return &demoWorkload{yaml: text, sc: sc, inst: inst, late: demoLateOrg}, nil
}
