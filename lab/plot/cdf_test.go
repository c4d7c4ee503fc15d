package plot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coopgrid/coopgrid/lab/sim"
)

// firstRise is the leftmost column where colour c draws a vertical run
// taller than a legend swatch (a step of the CDF), or -1.
func firstRise(t *testing.T, path string, ci int) int {
	img := decode(t, path)
	b := img.Bounds()
	for x := b.Min.X; x < b.Max.X; x++ {
		if barHeight(img, x, colorOf(ci)) > 15 {
			return x
		}
	}
	return -1
}

func TestRelPerfCDF(t *testing.T) {
	dir := t.TempDir()
	// Series 0 wins every task (ratios below 1), series 1 loses every one:
	// series 0's steps must be drawn left of series 1's.
	wins := CDFSeries{Name: "A wins", Points: []sim.CDFPoint{{Ratio: 0.25, Fraction: 0.5}, {Ratio: 0.5, Fraction: 1}}}
	loses := CDFSeries{Name: "B wins", Points: []sim.CDFPoint{{Ratio: 2, Fraction: 0.5}, {Ratio: 4, Fraction: 1}}}
	out := filepath.Join(dir, "cdf.png")
	if err := RelPerfCDF(out, "t", "EHOSEP", "HOSEP", CDFPanel{Title: "p", Series: []CDFSeries{wins, loses}}); err != nil {
		t.Fatal(err)
	}
	a, b := firstRise(t, out, 0), firstRise(t, out, 1)
	if a < 0 || b < 0 || a >= b {
		t.Errorf("first steps at x = %d (A wins) and %d (B wins): want both drawn, A's left of B's", a, b)
	}
	two := filepath.Join(dir, "two.png")
	if err := RelPerfCDF(two, "t", "A", "B", CDFPanel{Title: "1", Series: []CDFSeries{wins}}, CDFPanel{Title: "2", Series: []CDFSeries{loses}}); err != nil {
		t.Fatal(err)
	}
	if img := decode(t, two); img.Bounds().Dy() <= decode(t, out).Bounds().Dy() {
		t.Errorf("two panels are %d px high, one panel %d: want taller", img.Bounds().Dy(), decode(t, out).Bounds().Dy())
	}
}

func TestRelPerfCDFBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.png")
	good := CDFSeries{Name: "s", Points: []sim.CDFPoint{{Ratio: 0.5, Fraction: 0.5}, {Ratio: 2, Fraction: 1}}}
	bad := func(pts ...sim.CDFPoint) CDFPanel { return CDFPanel{Series: []CDFSeries{{Name: "s", Points: pts}}} }
	for _, tc := range []struct {
		name, path string
		panels     []CDFPanel
		want       string
	}{
		{"no panels", out, nil, "no panels"},
		{"no series", out, []CDFPanel{{Title: "p"}}, "panel 0 has no series"},
		{"no points", out, []CDFPanel{bad()}, "no points"},
		{"zero ratio", out, []CDFPanel{bad(sim.CDFPoint{Ratio: 0, Fraction: 1})}, "ratio 0"},
		{"fraction above 1", out, []CDFPanel{bad(sim.CDFPoint{Ratio: 1, Fraction: 1.5})}, "fraction 1.5"},
		{"descending", out, []CDFPanel{bad(sim.CDFPoint{Ratio: 2, Fraction: 0.5}, sim.CDFPoint{Ratio: 1, Fraction: 1})}, "want both rising"},
		{"not png", filepath.Join(dir, "x.svg"), []CDFPanel{{Series: []CDFSeries{good}}}, ".png"},
	} {
		err := RelPerfCDF(tc.path, "t", "A", "B", tc.panels...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if _, serr := os.Stat(tc.path); !os.IsNotExist(serr) {
			t.Errorf("%s: %s was written", tc.name, tc.path)
		}
	}
}

func TestRatioTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0.2, 5, "1/4 1/2 1 2 4"},
		{0.9, 1.5, "1 1.19 1.41"},
	} {
		var got []string
		for _, tk := range ratioTicks(tc.lo, tc.hi) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("ticks(%v, %v) = %q, want %q", tc.lo, tc.hi, strings.Join(got, " "), tc.want)
		}
	}
}
