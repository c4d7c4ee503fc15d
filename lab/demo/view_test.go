package demo

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/ledger"
)

func testSnap() demoSnap {
	dp := 0.5
	return demoSnap{elapsed: 3 * time.Second, simSeconds: 900, leader: "U2", total: 10, done: 3, late: "U1",
		dead: map[string]bool{}, orgs: []ledger.OrgInfo{{
			Org: ledger.Org{Name: "U1", LimitMilliW: 200_000}, Machines: 2, MachinesUp: 2, DP: &dp,
			PIMilliW: 100_000, Queued: 1, Running: 2, Done: 3,
		}}}
}

// TestDemoViewPlain: off a terminal, the legend once, then one labelled
// status line per frame, no escape sequence.
func TestDemoViewPlain(t *testing.T) {
	var b bytes.Buffer
	v := newDemoView(&b, false)
	v.frame(testSnap(), true)
	v.frame(testSnap(), true)
	out := b.String()
	if strings.Contains(out, "\x1b[") {
		t.Errorf("plain output holds escape sequences: %q", out)
	}
	if n := strings.Count(out, demoLegend[0]); n != 1 {
		t.Errorf("the legend is printed %d times, want once:\n%s", n, out)
	}
	want := "U1: DP +0.50, PI/limit 100/200 W, queued 1, running 2, done 3"
	if n := strings.Count(out, want); n != 2 {
		t.Errorf("%q appears %d times, want 2:\n%s", want, n, out)
	}
	if strings.Index(out, demoLegend[0]) > strings.Index(out, want) {
		t.Errorf("the legend comes after the first status line:\n%s", out)
	}
}

// TestDemoViewTerminal: on a terminal, every frame after the first moves
// back up over the last one and clears it, and each frame names its
// columns and carries the legend.
func TestDemoViewTerminal(t *testing.T) {
	var b bytes.Buffer
	v := &demoView{out: &b, tty: true, width: 400}
	v.frame(testSnap(), false)
	first := b.String()
	lines := strings.Count(first, "\n")
	for _, want := range []string{"org", "peer", "machines up", "DP", "PI / limit W", "queued", "running", "done", demoLegend[0]} {
		if !strings.Contains(first, want) {
			t.Errorf("the frame lacks %q:\n%s", want, first)
		}
	}
	if strings.Contains(first, "\x1b[") {
		t.Errorf("the first frame moves the cursor: %q", first)
	}
	b.Reset()
	v.frame(testSnap(), false)
	if want := fmt.Sprintf("\x1b[%dA\x1b[J", lines); !strings.HasPrefix(b.String(), want) {
		t.Errorf("the second frame starts %q, want %q (back %d lines, clear)", b.String()[:min(12, b.Len())], want, lines)
	}
}

// TestDemoPlotsBesidePrediction: the three charts are written as PNG, and
// live and predicted results must describe the same organisations.
func TestDemoPlotsBesidePrediction(t *testing.T) {
	org := func(name string, sat float64) sim.OrgMetrics {
		return sim.OrgMetrics{Name: name, SatisfactionEHOSEP: sat, UserJ: 2e6, OwnerJ: 3e6, TurnaroundMean: 600, TurnaroundGeoMean: 500}
	}
	live := &sim.Result{Scenario: "s", Orgs: []sim.OrgMetrics{org("U1", 80), org("U2", math.NaN())}}
	pred := &sim.Result{Scenario: "s", Orgs: []sim.OrgMetrics{org("U1", 90), org("U2", 70)}}
	dir := t.TempDir()
	plots, err := writeDemoPlots(dir, live, pred, map[string]string{"U1": "U1 (late)"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plots.Satisfaction, plots.Energy, plots.Turnaround} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	other := t.TempDir()
	if _, err := writeDemoPlots(other, live, &sim.Result{Orgs: pred.Orgs[:1]}, nil); err == nil {
		t.Error("one predicted organisation for two live ones: no error")
	}
	if left, _ := os.ReadDir(other); len(left) != 0 {
		t.Errorf("a refused chart left files: %v", left)
	}
}
