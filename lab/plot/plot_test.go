package plot

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/scenario"
	"github.com/coopgrid/coopgrid/lab/sim"
	"github.com/coopgrid/coopgrid/policy"
)

// summary builds a hand-made summary: org i has satisfaction base+10·i
// (±2), user energy (i+1) MJ, owner energy (4−i) MJ, turnaround (i+1)·10
// minutes.
func summary(base float64, names ...string) *sim.Summary {
	s := &sim.Summary{Scenario: "test", Policy: "ehosep", Runs: 60}
	for i, n := range names {
		f := float64(i)
		s.Orgs = append(s.Orgs, sim.OrgSummary{
			Name:                n,
			SatisfactionEHOSEP:  sim.Stat{Mean: base + 10*f, CI95: 2, N: 60},
			SatisfactionHOSEP:   sim.Stat{Mean: 50 + f, CI95: 1, N: 60},
			UserJ:               sim.Stat{Mean: (f + 1) * 1e6, CI95: 1e4, N: 60},
			OwnerJ:              sim.Stat{Mean: (4 - f) * 1e6, CI95: 1e4, N: 60},
			UserKJs:             sim.Stat{Mean: f + 1, CI95: 0.1, N: 60},
			TurnaroundMean:      sim.Stat{Mean: (f + 1) * 600, CI95: 30, N: 60},
			TurnaroundGeoMean:   sim.Stat{Mean: (f + 1) * 500, CI95: 30, N: 60},
			BoundedSlowdownMean: sim.Stat{Mean: 1 + f/10, CI95: 0.01, N: 60},
		})
	}
	return s
}

// decode checks that path is a PNG of sensible size and returns the image.
func decode(t *testing.T, path string) image.Image {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if len(data) < 2000 {
		t.Errorf("%s: %d bytes, want a non-trivial image (≥ 2000)", path, len(data))
	}
	if len(data) > 200_000 {
		t.Errorf("%s: %d bytes, want a modest image (≤ 200 kB)", path, len(data))
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: not an image: %v", path, err)
	}
	if format != "png" || cfg.Width < 400 || cfg.Height < 200 {
		t.Errorf("%s: %s %d×%d, want a PNG of at least 400×200", path, format, cfg.Width, cfg.Height)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// countColor counts the pixels of exactly colour c.
func countColor(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, a := img.At(x, y).RGBA()
			if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bb>>8) == c.B && uint8(a>>8) == c.A {
				n++
			}
		}
	}
	return n
}

// barHeight measures, in pixels, the tallest run of colour c in column x.
func barHeight(img image.Image, x int, c color.RGBA) int {
	best, run := 0, 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		r, g, bb, _ := img.At(x, y).RGBA()
		if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bb>>8) == c.B {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// barHeights finds, per contiguous horizontal stretch of columns holding
// colour c (taller than a legend swatch), the height of its bar, left to
// right.
func barHeights(img image.Image, c color.RGBA) []int {
	var out []int
	b := img.Bounds()
	in := false
	for x := b.Min.X; x < b.Max.X; x++ {
		h := barHeight(img, x, c)
		switch {
		case h > 15 && !in:
			in = true
			out = append(out, h)
		case h > 15 && in:
			out[len(out)-1] = max(out[len(out)-1], h)
		case h <= 15:
			in = false
		}
	}
	return out
}

func TestCaseBars(t *testing.T) {
	dir := t.TempDir()
	s := summary(100, "U1", "U2", "U3", "U4")
	for _, tc := range []struct {
		m      Metric
		series int // bar colours expected
	}{
		{Satisfaction, 1},
		{SatisfactionHOSEP, 1},
		{Energy, 2},
		{EnergyKJs, 1},
		{Turnaround, 2},
		{TurnaroundGeoMean, 1},
		{BoundedSlowdown, 1},
	} {
		t.Run(tc.m.String(), func(t *testing.T) {
			path := filepath.Join(dir, "bars.png")
			if err := CaseBars(path, "test "+tc.m.String(), s, tc.m); err != nil {
				t.Fatal(err)
			}
			img := decode(t, path)
			for j := 0; j < tc.series; j++ {
				if n := countColor(img, colorOf(j)); n < 200 {
					t.Errorf("series %d colour: %d pixels, want its bars drawn", j, n)
				}
			}
			if n := countColor(img, colorOf(tc.series)); n > 0 {
				t.Errorf("colour of series %d drawn (%d pixels) but the metric has %d series", tc.series, n, tc.series)
			}
		})
	}
}

// TestCaseBarsHeights checks that bars are drawn to scale: the satisfaction
// bars of the hand-made summary (100, 110, 120, 130) grow left to right,
// and the user-energy bars (1, 2, 3, 4 MJ) are proportional to the values.
func TestCaseBarsHeights(t *testing.T) {
	dir := t.TempDir()
	s := summary(100, "U1", "U2", "U3", "U4")
	path := filepath.Join(dir, "sat.png")
	if err := CaseBars(path, "heights", s, Satisfaction); err != nil {
		t.Fatal(err)
	}
	hs := barHeights(decode(t, path), colorOf(0))
	if len(hs) != 4 {
		t.Fatalf("found %d satisfaction bars, want 4 (%v)", len(hs), hs)
	}
	for i := 1; i < 4; i++ {
		if hs[i] <= hs[i-1] {
			t.Errorf("bar heights %v: want strictly increasing like 100, 110, 120, 130", hs)
		}
	}
	path = filepath.Join(dir, "energy.png")
	if err := CaseBars(path, "energy", s, Energy); err != nil {
		t.Fatal(err)
	}
	img := decode(t, path)
	user, owner := barHeights(img, colorOf(0)), barHeights(img, colorOf(1))
	if len(user) != 4 || len(owner) != 4 {
		t.Fatalf("found %d user and %d owner bars, want 4 each", len(user), len(owner))
	}
	for i := range 4 {
		// user energy is (i+1) MJ: proportional to the first bar within
		// a pixel or two of rounding (and the whisker's cap).
		want := float64(user[0]) * float64(i+1)
		if math.Abs(float64(user[i])-want) > 3+0.03*want {
			t.Errorf("user bar %d is %d px, want about %.0f (values 1:2:3:4): %v", i, user[i], want, user)
		}
		if i > 0 && owner[i] >= owner[i-1] {
			t.Errorf("owner bars %v: want decreasing like 4, 3, 2, 1 MJ", owner)
		}
	}
}

func TestLimitSweep(t *testing.T) {
	dir := t.TempDir()
	limits := []string{"80%", "100%", "150%", "system"}
	var sums []*sim.Summary
	for k := range limits {
		sums = append(sums, summary(50+20*float64(k), "U1", "U2", "U3", "U4"))
	}
	for _, m := range []Metric{Satisfaction, EnergyKJs, Turnaround} {
		path := filepath.Join(dir, "sweep.png")
		if err := LimitSweep(path, "sweep "+m.String(), limits, sums, m); err != nil {
			t.Fatal(err)
		}
		img := decode(t, path)
		for i := range 4 {
			if n := countColor(img, colorOf(i)); n < 50 {
				t.Errorf("%s: organisation %d's colour: %d pixels, want its line and markers", m, i, n)
			}
		}
		if n := countColor(img, colorOf(4)); n > 0 {
			t.Errorf("%s: a fifth colour drawn for four organisations", m)
		}
	}
}

func TestRelDiffBars(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rel.png")
	cats := []string{"U1", "U2", "U3", "U4", "total"}
	pub := Panel{Title: "published", Series: []Bars{
		{Name: "80%", Values: []float64{-52.5, -51.2, -45.47, -56.98, -51.67}},
		{Name: "system", Values: []float64{-6.54, 2.89, 10.93, 10.62, 2.55}},
	}}
	ours := Panel{Title: "this project", Series: []Bars{
		{Name: "80%", Values: []float64{-40, -45, math.NaN(), -50, -44}},
		{Name: "system", Values: []float64{-1, 2, 3, 4, 1}},
	}}
	if err := RelDiffBars(path, "table 11", cats, pub, ours); err != nil {
		t.Fatal(err)
	}
	img := decode(t, path)
	if img.Bounds().Dy() < 2*img.Bounds().Dx()/3 {
		t.Errorf("two stacked panels: %v, want a tall image", img.Bounds())
	}
	// Ten bars of the first series (five per panel, one NaN skipped) and
	// legend swatches.
	if hs := barHeights(img, colorOf(0)); len(hs) < 5 {
		t.Errorf("found %d stretches of the first series' colour, want the bars of both panels", len(hs))
	}
	if err := RelDiffBars(filepath.Join(dir, "one.png"), "", cats, ours); err != nil {
		t.Fatal(err)
	}
	decode(t, filepath.Join(dir, "one.png"))
}

func TestRelDiff(t *testing.T) {
	a := summary(0, "U1", "U2")
	b := summary(0, "U1", "U2")
	b.Orgs[0].UserKJs.Mean = 2 // a: 1 → −50 %
	b.Orgs[1].UserKJs.Mean = 0 // zero base → NaN
	got, err := RelDiff(a, b, EnergyKJs)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != -50 || !math.IsNaN(got[1]) {
		t.Errorf("RelDiff = %v, want [-50 NaN]", got)
	}
	if _, err := RelDiff(a, summary(0, "U1", "U3"), EnergyKJs); err == nil {
		t.Error("RelDiff of summaries with different organisations: want an error")
	}
	if _, err := RelDiff(a, b, Metric(99)); err == nil {
		t.Error("RelDiff with an unknown metric: want an error")
	}
	if v := RelPct(3, 2); v != 50 {
		t.Errorf("RelPct(3, 2) = %v, want 50", v)
	}
}

// TestBadInput: every bad input is an error and writes nothing.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	good := summary(10, "U1", "U2")
	undefined := summary(10, "U1", "U2")
	for i := range undefined.Orgs {
		undefined.Orgs[i].SatisfactionEHOSEP = sim.Stat{Mean: math.NaN(), CI95: math.NaN()}
	}
	out := filepath.Join(dir, "x.png")
	cats := []string{"a", "b"}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"case nil summary", func() error { return CaseBars(out, "t", nil, Satisfaction) }},
		{"case empty summary", func() error { return CaseBars(out, "t", &sim.Summary{}, Satisfaction) }},
		{"case unknown metric", func() error { return CaseBars(out, "t", good, Metric(0)) }},
		{"case all undefined", func() error { return CaseBars(out, "t", undefined, Satisfaction) }},
		{"case not png", func() error { return CaseBars(filepath.Join(dir, "x.svg"), "t", good, Satisfaction) }},
		{"case missing dir", func() error { return CaseBars(filepath.Join(dir, "no", "x.png"), "t", good, Satisfaction) }},
		{"sweep no summaries", func() error { return LimitSweep(out, "t", nil, nil, Satisfaction) }},
		{"sweep empty summaries", func() error {
			return LimitSweep(out, "t", []string{"80%"}, []*sim.Summary{{}}, Satisfaction)
		}},
		{"sweep nil summary", func() error {
			return LimitSweep(out, "t", []string{"80%", "100%"}, []*sim.Summary{good, nil}, Satisfaction)
		}},
		{"sweep length mismatch", func() error {
			return LimitSweep(out, "t", []string{"80%"}, []*sim.Summary{good, good}, Satisfaction)
		}},
		{"sweep different orgs", func() error {
			return LimitSweep(out, "t", []string{"80%", "100%"}, []*sim.Summary{good, summary(1, "U1", "U3")}, Satisfaction)
		}},
		{"sweep unknown metric", func() error {
			return LimitSweep(out, "t", []string{"80%"}, []*sim.Summary{good}, Metric(42))
		}},
		{"sweep all undefined", func() error {
			return LimitSweep(out, "t", []string{"80%"}, []*sim.Summary{undefined}, Satisfaction)
		}},
		{"rel no categories", func() error { return RelDiffBars(out, "t", nil, Panel{Series: []Bars{{Name: "a", Values: nil}}}) }},
		{"rel no panels", func() error { return RelDiffBars(out, "t", cats) }},
		{"rel empty panel", func() error { return RelDiffBars(out, "t", cats, Panel{}) }},
		{"rel short series", func() error {
			return RelDiffBars(out, "t", cats, Panel{Series: []Bars{{Name: "a", Values: []float64{1}}}})
		}},
		{"rel infinite", func() error {
			return RelDiffBars(out, "t", cats, Panel{Series: []Bars{{Name: "a", Values: []float64{1, math.Inf(1)}}}})
		}},
		{"rel all NaN", func() error {
			return RelDiffBars(out, "t", cats, Panel{Series: []Bars{{Name: "a", Values: []float64{math.NaN(), math.NaN()}}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil {
				t.Fatal("want an error")
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 0 {
				t.Fatalf("bad input wrote %d files (first %s)", len(entries), entries[0].Name())
			}
		})
	}
}

// TestRealSummary draws the charts of a real simulation of the tiny
// scenario (examples/scenarios/tiny.yaml).
func TestRealSummary(t *testing.T) {
	sc, err := scenario.Load("../../examples/scenarios/tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New("ehosep")
	if err != nil {
		t.Fatal(err)
	}
	gen := func(run int) (*scenario.Instance, error) { return sc.Instance(scenario.Options{}, uint64(run+1)) }
	s, err := sim.RunMany(context.Background(), gen, p, sim.Config{TickSeconds: 30, CheckpointBlockSeconds: 300}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, m := range []Metric{Satisfaction, Energy, Turnaround} {
		path := filepath.Join(dir, "real.png")
		if err := CaseBars(path, "tiny", s, m); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		decode(t, path)
	}
	if err := LimitSweep(filepath.Join(dir, "sweep.png"), "tiny", []string{"a", "b"}, []*sim.Summary{s, s}, Satisfaction); err != nil {
		t.Fatal(err)
	}
	decode(t, filepath.Join(dir, "sweep.png"))
}

func TestGroupedBarsWithCI(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "g.png")
	cats := []string{"User1", "User2", "User3"}
	p := Panel{Title: "low", Series: []Bars{
		{Name: "OSEP", Values: []float64{20, 90, 120}, CI: []float64{2, math.NaN(), 3}},
		{Name: "HOSEP", Values: []float64{40, 80, 130}, CI: []float64{1, 1, 1}},
	}}
	if err := GroupedBars(path, "satisfaction", "satisfaction (%)", cats, p, p, p); err != nil {
		t.Fatal(err)
	}
	img := decode(t, path)
	if hs := barHeights(img, colorOf(1)); len(hs) != 3 {
		t.Errorf("found %d columns of HOSEP bars, want 3 (one per category)", len(hs))
	}
	// In the column of User3's HOSEP bar, one bar per stacked panel.
	b := img.Bounds()
	best, bestX := 0, 0
	for x := b.Min.X; x < b.Max.X; x++ {
		if h := barHeight(img, x, colorOf(1)); h > best {
			best, bestX = h, x
		}
	}
	runs, run := 0, 0
	for y := b.Min.Y; y <= b.Max.Y; y++ {
		r, g, bb, _ := img.At(bestX, y).RGBA()
		c := colorOf(1)
		if y < b.Max.Y && uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bb>>8) == c.B {
			run++
			continue
		}
		if run > 15 {
			runs++
		}
		run = 0
	}
	if runs != 3 {
		t.Errorf("column %d holds %d HOSEP bars, want 3 (one per panel)", bestX, runs)
	}
	bad := Panel{Series: []Bars{{Name: "x", Values: []float64{1, 2, 3}, CI: []float64{1}}}}
	if err := GroupedBars(filepath.Join(dir, "bad.png"), "", "", cats, bad); err == nil {
		t.Error("CI of the wrong length: want an error")
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 300, []string{"0", "50", "100", "150", "200", "250", "300"}},
		{-60, 30, []string{"-60", "-40", "-20", "0", "20"}},
		{0, 1.2, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"}},
		{0, 14, []string{"0.0", "2.5", "5.0", "7.5", "10.0", "12.5"}},
	} {
		var got []string
		for _, tk := range niceTicks(tc.lo, tc.hi) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("niceTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
}
