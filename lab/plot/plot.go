// Package plot draws the simulator's results as PNG charts in the style of
// the EHOSEP dissertation's figures (seed 000, figures 2-18): bars per
// organisation with 95 % confidence-interval error bars for one case, one
// line per organisation against the late organisation's power limit for a
// sweep, and grouped bars of relative differences between two policies.
//
// Every function validates its input completely before it creates a file,
// so bad input leaves the file system untouched. Charts are rendered into
// memory and written in one call.
package plot

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	imgdraw "image/draw"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/coopgrid/coopgrid/lab/sim"
)

// Metric selects what a chart shows.
type Metric int

const (
	// Satisfaction is seed 000 eq. 4.1 as the author's simulator code
	// computes it (sim.OrgSummary.SatisfactionEHOSEP).
	Satisfaction Metric = iota + 1
	// SatisfactionHOSEP is seed 001 eqs. 1-2.
	SatisfactionHOSEP
	// Energy is busy energy in MJ. CaseBars shows each organisation as user
	// (its tasks, wherever they ran) and as owner (its machines, whoever
	// used them) side by side; sweeps and relative differences use the
	// user side.
	Energy
	// EnergyKJs is the user-side energy divided by the run's makespan, the
	// dissertation's KJ/s.
	EnergyKJs
	// Turnaround is the mean turnaround in minutes. CaseBars shows the
	// geometric mean beside it.
	Turnaround
	// TurnaroundGeoMean is the geometric mean turnaround in minutes.
	TurnaroundGeoMean
	// BoundedSlowdown is the mean bounded slowdown (τ = 10 s).
	BoundedSlowdown
	// BoundedSlowdown100 is the mean bounded slowdown with τ = 100 s.
	BoundedSlowdown100
)

// String names the metric as chart axes do.
func (m Metric) String() string {
	switch m {
	case Satisfaction:
		return "satisfaction (eq. 4.1)"
	case SatisfactionHOSEP:
		return "satisfaction (HOSEP, %)"
	case Energy:
		return "energy (MJ)"
	case EnergyKJs:
		return "energy (KJ/s)"
	case Turnaround:
		return "mean turnaround (min)"
	case TurnaroundGeoMean:
		return "geometric-mean turnaround (min)"
	case BoundedSlowdown:
		return "bounded slowdown (τ = 10 s)"
	case BoundedSlowdown100:
		return "bounded slowdown (τ = 100 s)"
	}
	return fmt.Sprintf("metric(%d)", int(m))
}

func (m Metric) valid() bool { return m >= Satisfaction && m <= BoundedSlowdown100 }

// series is one named quantity of an organisation, scaled for display.
type series struct {
	name string
	get  func(o *sim.OrgSummary) sim.Stat
	// scale converts the summary's unit to the chart's.
	scale float64
}

// seriesOf lists what CaseBars draws for m (the first entry is what sweeps
// and relative differences use).
func seriesOf(m Metric) []series {
	switch m {
	case Satisfaction:
		return []series{{"satisfaction", func(o *sim.OrgSummary) sim.Stat { return o.SatisfactionEHOSEP }, 1}}
	case SatisfactionHOSEP:
		return []series{{"satisfaction (HOSEP)", func(o *sim.OrgSummary) sim.Stat { return o.SatisfactionHOSEP }, 1}}
	case Energy:
		return []series{
			{"as user", func(o *sim.OrgSummary) sim.Stat { return o.UserJ }, 1e-6},
			{"as owner", func(o *sim.OrgSummary) sim.Stat { return o.OwnerJ }, 1e-6},
		}
	case EnergyKJs:
		return []series{{"KJ/s as user", func(o *sim.OrgSummary) sim.Stat { return o.UserKJs }, 1}}
	case Turnaround:
		return []series{
			{"mean", func(o *sim.OrgSummary) sim.Stat { return o.TurnaroundMean }, 1.0 / 60},
			{"geometric mean", func(o *sim.OrgSummary) sim.Stat { return o.TurnaroundGeoMean }, 1.0 / 60},
		}
	case TurnaroundGeoMean:
		return []series{{"geometric mean", func(o *sim.OrgSummary) sim.Stat { return o.TurnaroundGeoMean }, 1.0 / 60}}
	case BoundedSlowdown:
		return []series{{"bounded slowdown", func(o *sim.OrgSummary) sim.Stat { return o.BoundedSlowdownMean }, 1}}
	case BoundedSlowdown100:
		return []series{{"bounded slowdown (τ = 100 s)", func(o *sim.OrgSummary) sim.Stat { return o.BoundedSlowdown100Mean }, 1}}
	}
	return nil
}

// Value returns organisation o's figure for m in the chart's unit (the
// first series of m: the user side for Energy, the arithmetic mean for
// Turnaround), with its 95 % CI half-width. It is how the charts read a
// summary, exported so that tables built beside them agree with them.
func Value(o *sim.OrgSummary, m Metric) (mean, ci95 float64, err error) {
	ss := seriesOf(m)
	if len(ss) == 0 {
		return 0, 0, fmt.Errorf("plot: unknown metric %d", int(m))
	}
	st := ss[0].get(o)
	return st.Mean * ss[0].scale, st.CI95 * ss[0].scale, nil
}

// RelDiff returns, per organisation of a, the relative difference of m
// between a and base in percent, (a − base)/base · 100, as the dissertation
// computes tables 11-18. Both summaries must have the same organisations in
// the same order. An undefined or zero base gives NaN for that organisation.
func RelDiff(a, base *sim.Summary, m Metric) ([]float64, error) {
	if err := sameOrgs([]*sim.Summary{a, base}); err != nil {
		return nil, err
	}
	if !m.valid() {
		return nil, fmt.Errorf("plot: unknown metric %d", int(m))
	}
	out := make([]float64, len(a.Orgs))
	for i := range a.Orgs {
		va, _, _ := Value(&a.Orgs[i], m)
		vb, _, _ := Value(&base.Orgs[i], m)
		out[i] = RelPct(va, vb)
	}
	return out, nil
}

// RelPct is (a − base)/base · 100, NaN when base is zero or either value is
// undefined.
func RelPct(a, base float64) float64 {
	if base == 0 || !finite(a) || !finite(base) {
		return math.NaN()
	}
	return (a - base) / base * 100
}

// Chart sizes: about 600 × 380 pixels at 96 dpi, enough to read the
// labels, small enough to commit.
const (
	width       = 16 * vg.Centimeter
	height      = 10 * vg.Centimeter
	panelHeight = 7 * vg.Centimeter
)

// palette is the Okabe-Ito colour-blind-safe palette: organisation i (or
// series i) is palette[i % len].
var palette = []color.RGBA{
	{0x00, 0x72, 0xB2, 0xFF}, // blue
	{0xE6, 0x9F, 0x00, 0xFF}, // orange
	{0x00, 0x9E, 0x73, 0xFF}, // green
	{0xD5, 0x5E, 0x00, 0xFF}, // vermillion
	{0xCC, 0x79, 0xA7, 0xFF}, // purple
	{0x56, 0xB4, 0xE9, 0xFF}, // sky blue
	{0x00, 0x00, 0x00, 0xFF}, // black
}

func colorOf(i int) color.RGBA { return palette[i%len(palette)] }

var glyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}}

// pngPalette holds everything a chart draws: a 32-step gray ramp (text,
// axes, grid, white) and six tints of each series colour against white
// (its anti-aliased edges), the last tint the colour itself. Charts are
// written as paletted PNGs over it, about a third of the size of RGBA ones
// and indistinguishable from them.
var pngPalette = func() color.Palette {
	var p color.Palette
	for g := 0; g < 32; g++ {
		v := uint8(g * 255 / 31)
		p = append(p, color.RGBA{v, v, v, 0xFF})
	}
	for _, c := range palette {
		for k := 1; k <= 6; k++ {
			a := float64(k) / 6
			mix := func(x uint8) uint8 { return uint8(float64(x)*a + 255*(1-a) + 0.5) }
			p = append(p, color.RGBA{mix(c.R), mix(c.G), mix(c.B), 0xFF})
		}
	}
	return p
}()

// encodePNG writes img as a paletted PNG over pngPalette, best compression.
func encodePNG(w io.Writer, img image.Image) error {
	pi := image.NewPaletted(img.Bounds(), pngPalette)
	imgdraw.Draw(pi, pi.Rect, img, img.Bounds().Min, imgdraw.Src)
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	return enc.Encode(w, pi)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// checkPath refuses anything but a .png path in an existing directory, so
// that nothing is rendered for a file that cannot be written.
func checkPath(path string) error {
	if !strings.EqualFold(filepath.Ext(path), ".png") {
		return fmt.Errorf("plot: %q: the file name must end in .png", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("plot: %q: %w", path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("plot: %q: %s is not a directory", path, dir)
	}
	return nil
}

// sameOrgs checks that every summary is non-nil, has organisations, and
// names them identically in the same order.
func sameOrgs(sums []*sim.Summary) error {
	if len(sums) == 0 {
		return fmt.Errorf("plot: no summaries")
	}
	for k, s := range sums {
		if s == nil {
			return fmt.Errorf("plot: summary %d is nil", k)
		}
		if len(s.Orgs) == 0 {
			return fmt.Errorf("plot: summary %d has no organisations", k)
		}
		if len(s.Orgs) != len(sums[0].Orgs) {
			return fmt.Errorf("plot: summary %d has %d organisations, summary 0 has %d", k, len(s.Orgs), len(sums[0].Orgs))
		}
		for i := range s.Orgs {
			if s.Orgs[i].Name != sums[0].Orgs[i].Name {
				return fmt.Errorf("plot: summary %d: organisation %d is %q, in summary 0 %q", k, i, s.Orgs[i].Name, sums[0].Orgs[i].Name)
			}
		}
	}
	return nil
}

func orgNames(s *sim.Summary) []string {
	names := make([]string, len(s.Orgs))
	for i := range s.Orgs {
		names[i] = s.Orgs[i].Name
	}
	return names
}

// newPlot returns a plot with the common style: a grid, about six labelled
// ticks on the Y axis, the legend at the top right (writePNG moves it into
// a margin of its own so that it never hides data).
func newPlot(title, ylabel string) *gplot.Plot {
	p := gplot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(4)
	p.Y.Label.Text = ylabel
	p.Y.Tick.Marker = gplot.TickerFunc(niceTicks)
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p
}

// niceTicks labels about six round values (steps of 1, 2, 2.5 or 5 times a
// power of ten) between min and max.
func niceTicks(lo, hi float64) []gplot.Tick {
	span := hi - lo
	if !(span > 0) || !finite(span) {
		return gplot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := span / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	prec := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	if math.Abs(step/math.Pow(10, math.Floor(math.Log10(step)+1e-9))-2.5) < 1e-9 {
		prec++
	}
	var ticks []gplot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		ticks = append(ticks, gplot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
	}
	return ticks
}

// legendWidth is the room the legend needs beside the data: the widest
// name, a space, the swatch and a margin.
func legendWidth(p *gplot.Plot, names []string) vg.Length {
	if len(names) == 0 {
		return 0
	}
	var w vg.Length
	for _, n := range names {
		w = max(w, p.Legend.TextStyle.Width(n))
	}
	em := p.Legend.TextStyle.Width(" ")
	return w + p.Legend.ThumbnailWidth + 3*em
}

// headroom lifts the top of the Y axis so the legend (drawn at the top)
// does not hide the data, and keeps 0 on the axis.
func headroom(p *gplot.Plot, frac float64) {
	p.Y.Min = math.Min(p.Y.Min, 0)
	p.Y.Max = math.Max(p.Y.Max, 0)
	span := p.Y.Max - p.Y.Min
	if span == 0 {
		span = 1
	}
	if p.Y.Max > 0 {
		p.Y.Max += frac * span
	}
	if p.Y.Min < 0 {
		p.Y.Min -= 0.05 * span
	}
}

// writePNG renders rows of plots (one column) and writes them to path. The
// legend names, if any, get a margin on the right of every panel.
func writePNG(path string, h vg.Length, legend []string, plots ...*gplot.Plot) error {
	img := vgimg.New(width, h)
	dc := draw.New(img)
	// A little room above the title, which gonum draws flush with the top.
	dc = draw.Crop(dc, 0, 0, 0, -vg.Points(3))
	lw := legendWidth(plots[0], legend)
	dc = draw.Crop(dc, 0, -lw, 0, 0)
	for _, p := range plots {
		p.Legend.Top, p.Legend.Left = true, false
		p.Legend.XOffs = lw
	}
	if len(plots) == 1 {
		plots[0].Draw(dc)
	} else {
		grid := make([][]*gplot.Plot, len(plots))
		for i, p := range plots {
			grid[i] = []*gplot.Plot{p}
		}
		tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Millimeter * 3, PadBottom: vg.Millimeter}
		cs := gplot.Align(grid, tiles, dc)
		for i, p := range plots {
			p.Draw(cs[i][0])
		}
	}
	var buf bytes.Buffer
	if err := encodePNG(&buf, img.Image()); err != nil {
		return fmt.Errorf("plot: encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
