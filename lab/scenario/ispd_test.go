package scenario

import (
	"strings"
	"testing"
)

const ispdSrc = `
sim: {engine: ispd}
late: {org: B, delay: 600}
types:
  - {name: A, gflop: [100, 300]}
orgs:
  - name: A
    machines: [{count: 2, gflops: 10, watts: 100}]
    mix: {A: 400}
  - name: B
    machines: [{count: 1, gflops: 10, watts: 100}]
    mix: {A: 400}
`

// TestISPDWorkload: the author's generator (CargaForNode.java L121-126)
// draws sizes from twoStageUniform(min, (min+max)/2, max, 1), the lower half
// of the range, and submit times delay + Exp(mean 5 s).
func TestISPDWorkload(t *testing.T) {
	sc := mustParse(t, ispdSrc)
	if sc.Engine != "ispd" {
		t.Fatalf("engine %q, want ispd", sc.Engine)
	}
	in, err := sc.Instance(Options{ISPDWorkload: true}, 7)
	if err != nil {
		t.Fatal(err)
	}
	var upper, lower int
	var sumA, nA float64
	for _, tk := range in.Tasks {
		// 100-300 GFlop: the lower half is 100 000 - 200 000 MFlop.
		if tk.SizeMFlop < 100_000 || tk.SizeMFlop > 200_000 {
			t.Fatalf("task %s: size %d MFlop outside the lower half [100000, 200000]", tk.ID, tk.SizeMFlop)
		}
		if tk.SizeMFlop > 150_000 {
			upper++
		} else {
			lower++
		}
		delay := 0.0
		if tk.Org == 1 {
			delay = 600
		}
		if tk.SubmitSeconds <= delay {
			t.Fatalf("task %s: submit %v s, want after the delay %v s", tk.ID, tk.SubmitSeconds, delay)
		}
		if tk.Org == 0 {
			sumA += tk.SubmitSeconds
			nA++
		}
	}
	// Uniform on the half: each quarter holds about half the tasks (800
	// tasks: 400 ± 3σ = 400 ± 42).
	if upper < 358 || lower < 358 {
		t.Errorf("sizes: %d in the lower quarter, %d in the next: not uniform on the lower half", lower, upper)
	}
	// Mean of 400 Exp(5) draws: 5 ± 3·5/√400 = 5 ± 0.75.
	if m := sumA / nA; m < 4.25 || m > 5.75 {
		t.Errorf("mean arrival %.2f s, want about 5 s", m)
	}
	// The default draw is untouched by the option's existence: the full
	// range, everything at the delay.
	def, err := sc.Instance(Options{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	above := 0
	for _, tk := range def.Tasks {
		if tk.SizeMFlop > 200_000 {
			above++
		}
		if tk.SubmitSeconds != 0 && tk.SubmitSeconds != 600 {
			t.Fatalf("default draw: task %s submitted at %v s", tk.ID, tk.SubmitSeconds)
		}
	}
	if above == 0 {
		t.Error("default draw: no size in the upper half of the range")
	}
}

func TestEngineKey(t *testing.T) {
	sc := mustParse(t, strings.Replace(ispdSrc, "engine: ispd", "engine: default", 1))
	if sc.Engine != "default" {
		t.Errorf("engine %q, want default", sc.Engine)
	}
	_, err := Parse("t.yaml", []byte(strings.Replace(ispdSrc, "engine: ispd", "engine: java", 1)))
	if err == nil || !strings.Contains(err.Error(), `t.yaml:2:15: sim.engine: unknown engine "java" (want default or ispd)`) {
		t.Errorf("bad engine: %v", err)
	}
}
