package plot

import (
	"fmt"
	"image/color"
	"math"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/coopgrid/coopgrid/lab/sim"
)

// ciBars draws bars centred at data x positions with data widths, and a
// vertical 95 % CI whisker on each. gonum's BarChart offsets grouped bars
// in canvas units, where its error bars cannot follow; this plotter keeps
// everything in data units. NaN heights are skipped; NaN or zero errors
// draw no whisker.
type ciBars struct {
	xs, ys, errs []float64
	width        float64
	fill         color.Color
}

func (b *ciBars) Plot(c draw.Canvas, p *gplot.Plot) {
	trX, trY := p.Transforms(&c)
	outline := draw.LineStyle{Color: color.Gray{Y: 0x40}, Width: vg.Points(0.5)}
	whisker := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	capW := vg.Points(3)
	for i, x := range b.xs {
		y := b.ys[i]
		if !finite(y) {
			continue
		}
		x0, x1 := trX(x-b.width/2), trX(x+b.width/2)
		y0, y1 := trY(0), trY(y)
		rect := []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}, {X: x0, Y: y0}}
		c.FillPolygon(b.fill, c.ClipPolygonY(rect))
		c.StrokeLines(outline, c.ClipLinesY(rect)...)
		if e := b.errs[i]; finite(e) && e > 0 {
			xc := trX(x)
			lo, hi := trY(y-e), trY(y+e)
			c.StrokeLines(whisker, c.ClipLinesY([]vg.Point{{X: xc, Y: lo}, {X: xc, Y: hi}})...)
			c.StrokeLines(whisker, c.ClipLinesY([]vg.Point{{X: xc - capW, Y: lo}, {X: xc + capW, Y: lo}})...)
			c.StrokeLines(whisker, c.ClipLinesY([]vg.Point{{X: xc - capW, Y: hi}, {X: xc + capW, Y: hi}})...)
		}
	}
}

func (b *ciBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	ymin, ymax = 0, 0
	for i, x := range b.xs {
		xmin = math.Min(xmin, x-b.width/2)
		xmax = math.Max(xmax, x+b.width/2)
		y := b.ys[i]
		if !finite(y) {
			continue
		}
		e := b.errs[i]
		if !finite(e) {
			e = 0
		}
		ymin = math.Min(ymin, y-e)
		ymax = math.Max(ymax, y+e)
	}
	return xmin, xmax, ymin, ymax
}

func (b *ciBars) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y},
		{X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y},
	}
	c.FillPolygon(b.fill, c.ClipPolygonY(pts))
}

// groupX is the centre of bar j of k in category i, and the bars' width:
// a group fills 80 % of the unit slot.
func groupX(i, j, k int) (x, w float64) {
	w = 0.8 / float64(k)
	return float64(i) + (float64(j)-float64(k-1)/2)*w, w
}

// CaseBars draws, for one case, one group of bars per organisation with
// the 95 % CI of each bar: satisfaction, energy (as user and as owner side
// by side), turnaround (mean and geometric mean side by side), and so on
// (see Metric). The chart is written to path, which must end in .png.
func CaseBars(path, title string, s *sim.Summary, m Metric) error {
	if s == nil {
		return fmt.Errorf("plot: case bars %q: nil summary", path)
	}
	if err := sameOrgs([]*sim.Summary{s}); err != nil {
		return fmt.Errorf("case bars %q: %w", path, err)
	}
	ss := seriesOf(m)
	if len(ss) == 0 {
		return fmt.Errorf("plot: case bars %q: unknown metric %d", path, int(m))
	}
	if err := checkPath(path); err != nil {
		return err
	}
	p := newPlot(title, m.String())
	var legend []string
	drawn := false
	for j, se := range ss {
		b := &ciBars{fill: colorOf(j)}
		for i := range s.Orgs {
			st := se.get(&s.Orgs[i])
			x, w := groupX(i, j, len(ss))
			b.xs = append(b.xs, x)
			b.ys = append(b.ys, st.Mean*se.scale)
			b.errs = append(b.errs, st.CI95*se.scale)
			b.width = w
			drawn = drawn || finite(st.Mean)
		}
		p.Add(b)
		if len(ss) > 1 {
			p.Legend.Add(se.name, b)
			legend = append(legend, se.name)
		}
	}
	if !drawn {
		return fmt.Errorf("plot: case bars %q: %s is undefined for every organisation", path, m)
	}
	p.NominalX(orgNames(s)...)
	p.X.Min, p.X.Max = -0.5, float64(len(s.Orgs))-0.5
	headroom(p, 0.05)
	return writePNG(path, height, legend, p)
}

// xyErr feeds gonum's YErrorBars: points with symmetric errors.
type xyErr struct {
	plotter.XYs
	plotter.YErrors
}

// LimitSweep draws one line per organisation (with 95 % CI error bars) of
// metric m against the sweep's x categories: sums[k] is the case at
// limits[k] (the dissertation's figures 2-10 and 11-18 put the late
// organisation's limit, 80 %, 100 %, 150 % and whole system, on the x
// axis). Every summary must have the same organisations in the same order.
func LimitSweep(path, title string, limits []string, sums []*sim.Summary, m Metric) error {
	if len(sums) == 0 {
		return fmt.Errorf("plot: limit sweep %q: no summaries", path)
	}
	if len(limits) != len(sums) {
		return fmt.Errorf("plot: limit sweep %q: %d limits for %d summaries", path, len(limits), len(sums))
	}
	if err := sameOrgs(sums); err != nil {
		return fmt.Errorf("limit sweep %q: %w", path, err)
	}
	if !m.valid() {
		return fmt.Errorf("plot: limit sweep %q: unknown metric %d", path, int(m))
	}
	if err := checkPath(path); err != nil {
		return err
	}
	p := newPlot(title, m.String())
	p.X.Label.Text = "power limit"
	nOrg := len(sums[0].Orgs)
	var legend []string
	drawn := false
	for i := range sums[0].Orgs {
		// A small horizontal shift per organisation keeps overlapping
		// error bars apart.
		shift := (float64(i) - float64(nOrg-1)/2) * 0.04
		var pts plotter.XYs
		var errs plotter.YErrors
		for k, s := range sums {
			mean, ci, _ := Value(&s.Orgs[i], m)
			if !finite(mean) {
				continue
			}
			if !finite(ci) {
				ci = 0
			}
			pts = append(pts, plotter.XY{X: float64(k) + shift, Y: mean})
			errs = append(errs, struct{ Low, High float64 }{ci, ci})
		}
		if len(pts) == 0 {
			continue
		}
		drawn = true
		col := colorOf(i)
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot: limit sweep %q: %w", path, err)
		}
		line.Color = col
		line.Width = vg.Points(1.5)
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("plot: limit sweep %q: %w", path, err)
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(3.5), Shape: glyphs[i%len(glyphs)]}
		eb, err := plotter.NewYErrorBars(xyErr{pts, errs})
		if err != nil {
			return fmt.Errorf("plot: limit sweep %q: %w", path, err)
		}
		eb.Color = col
		eb.CapWidth = vg.Points(5)
		p.Add(line, eb, sc)
		p.Legend.Add(sums[0].Orgs[i].Name, line, sc)
		legend = append(legend, sums[0].Orgs[i].Name)
	}
	if !drawn {
		return fmt.Errorf("plot: limit sweep %q: %s is undefined in every case", path, m)
	}
	p.NominalX(limits...)
	p.X.Min, p.X.Max = -0.4, float64(len(limits))-0.6
	headroom(p, 0.05)
	return writePNG(path, height, legend, p)
}

// Bars is one series of a grouped bar chart: a name for the legend, one
// value per category (NaN: no bar) and, optionally, the 95 % CI half-width
// of each value (nil, or NaN for one value: no whisker).
type Bars struct {
	Name   string
	Values []float64
	CI     []float64
}

// Panel is one chart of GroupedBars and RelDiffBars.
type Panel struct {
	Title  string
	Series []Bars
}

// RelDiffBars draws relative differences in percent (e.g. EHOSEP against
// HOSEP, or Best Fit against Worst Fit, per organisation) as grouped bars,
// one group per category, one bar per series. With several panels they are
// stacked on one shared Y scale, so that published and reproduced figures
// can be compared at a glance.
func RelDiffBars(path, title string, categories []string, panels ...Panel) error {
	return GroupedBars(path, title, "relative difference (%)", categories, panels...)
}

// GroupedBars draws one group of bars per category, one bar per series,
// with CI whiskers where given; several panels are stacked on one shared Y
// scale.
func GroupedBars(path, title, ylabel string, categories []string, panels ...Panel) error {
	if len(categories) == 0 {
		return fmt.Errorf("plot: grouped bars %q: no categories", path)
	}
	if len(panels) == 0 {
		return fmt.Errorf("plot: grouped bars %q: no panels", path)
	}
	drawn := false
	for pi, pn := range panels {
		if len(pn.Series) == 0 {
			return fmt.Errorf("plot: grouped bars %q: panel %d has no series", path, pi)
		}
		for _, se := range pn.Series {
			if len(se.Values) != len(categories) {
				return fmt.Errorf("plot: grouped bars %q: panel %d series %q has %d values for %d categories", path, pi, se.Name, len(se.Values), len(categories))
			}
			if se.CI != nil && len(se.CI) != len(categories) {
				return fmt.Errorf("plot: grouped bars %q: panel %d series %q has %d CIs for %d categories", path, pi, se.Name, len(se.CI), len(categories))
			}
			for i, v := range se.Values {
				if math.IsInf(v, 0) || (se.CI != nil && math.IsInf(se.CI[i], 0)) {
					return fmt.Errorf("plot: grouped bars %q: panel %d series %q: infinite value", path, pi, se.Name)
				}
				drawn = drawn || finite(v)
			}
		}
	}
	if !drawn {
		return fmt.Errorf("plot: grouped bars %q: every value is undefined", path)
	}
	if err := checkPath(path); err != nil {
		return err
	}
	plots := make([]*gplot.Plot, len(panels))
	var legend []string
	lo, hi := 0.0, 0.0
	for pi, pn := range panels {
		t := pn.Title
		if pi == 0 && title != "" {
			t = title + "\n" + pn.Title
		}
		p := newPlot(t, ylabel)
		for j, se := range pn.Series {
			b := &ciBars{fill: colorOf(j)}
			for i, v := range se.Values {
				x, w := groupX(i, j, len(pn.Series))
				b.xs = append(b.xs, x)
				b.ys = append(b.ys, v)
				e := math.NaN()
				if se.CI != nil {
					e = se.CI[i]
				}
				b.errs = append(b.errs, e)
				b.width = w
			}
			p.Add(b)
			p.Legend.Add(se.Name, b)
			legend = append(legend, se.Name)
		}
		p.NominalX(categories...)
		p.X.Min, p.X.Max = -0.5, float64(len(categories))-0.5
		headroom(p, 0.05)
		lo, hi = math.Min(lo, p.Y.Min), math.Max(hi, p.Y.Max)
		plots[pi] = p
	}
	for _, p := range plots {
		p.Y.Min, p.Y.Max = lo, hi
	}
	h := panelHeight * vg.Length(len(panels))
	if len(panels) == 1 {
		h = height
	}
	return writePNG(path, h, legend, plots...)
}
