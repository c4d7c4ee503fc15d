package plot

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/coopgrid/coopgrid/lab/sim"
)

// CDFSeries is one empirical distribution of ratios (sim.RelPerf.CDF).
type CDFSeries struct {
	Name   string
	Points []sim.CDFPoint
}

// CDFPanel is one panel of RelPerfCDF.
type CDFPanel struct {
	Title  string
	Series []CDFSeries
}

// RelPerfCDF draws seed 002's relative-performance figure (figures 10-14
// there): the cumulative share of tasks (Y) whose turnaround ratio A/B is at
// most X, X on a log scale, a dashed line at 1 (left of it A was faster,
// right of it B); a and b name the two policies on the X axis. One step
// line per series; panels are stacked on the same X range.
func RelPerfCDF(path, title, a, b string, panels ...CDFPanel) error {
	if len(panels) == 0 {
		return fmt.Errorf("plot: relative performance %q: no panels", path)
	}
	lo, hi := 1.0, 1.0
	for pi, pn := range panels {
		if len(pn.Series) == 0 {
			return fmt.Errorf("plot: relative performance %q: panel %d has no series", path, pi)
		}
		for _, se := range pn.Series {
			if err := checkCDF(se.Points); err != nil {
				return fmt.Errorf("plot: relative performance %q: panel %d series %q: %w", path, pi, se.Name, err)
			}
			lo = math.Min(lo, se.Points[0].Ratio)
			hi = math.Max(hi, se.Points[len(se.Points)-1].Ratio)
		}
	}
	if err := checkPath(path); err != nil {
		return err
	}
	// Symmetric about 1 on the log axis, so that A's and B's wins are drawn
	// at the same scale.
	span := math.Max(math.Log2(hi), -math.Log2(lo)) * 1.05
	lo, hi = math.Exp2(-span), math.Exp2(span)
	plots := make([]*gplot.Plot, len(panels))
	var legend []string
	for pi, pn := range panels {
		t := pn.Title
		if pi == 0 && title != "" {
			t = title + "\n" + pn.Title
		}
		p := newPlot(t, "share of tasks ≤ ratio")
		p.X.Label.Text = fmt.Sprintf("turnaround ratio %s / %s per task (log scale; < 1: %s faster)", a, b, a)
		p.X.Scale = gplot.LogScale{}
		p.X.Tick.Marker = gplot.TickerFunc(ratioTicks)
		p.X.Min, p.X.Max = lo, hi
		p.Y.Min, p.Y.Max = 0, 1.05
		one, err := plotter.NewLine(plotter.XYs{{X: 1, Y: 0}, {X: 1, Y: 1}})
		if err != nil {
			return fmt.Errorf("plot: relative performance %q: %w", path, err)
		}
		one.Color = color.Gray{0x60}
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(one)
		for j, se := range pn.Series {
			pts := make(plotter.XYs, 0, len(se.Points)+2)
			pts = append(pts, plotter.XY{X: lo, Y: 0}, plotter.XY{X: se.Points[0].Ratio, Y: 0})
			for _, c := range se.Points {
				pts = append(pts, plotter.XY{X: c.Ratio, Y: c.Fraction})
			}
			pts = append(pts, plotter.XY{X: hi, Y: 1})
			line, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("plot: relative performance %q: %w", path, err)
			}
			line.StepStyle = plotter.PostStep
			line.Color = colorOf(j)
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(se.Name, line)
			legend = append(legend, se.Name)
		}
		plots[pi] = p
	}
	h := panelHeight * vg.Length(len(panels))
	if len(panels) == 1 {
		h = height
	}
	return writePNG(path, h, legend, plots...)
}

// checkCDF accepts points with finite, positive, strictly ascending ratios
// and fractions rising within (0, 1].
func checkCDF(pts []sim.CDFPoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("no points")
	}
	for i, c := range pts {
		if !(c.Ratio > 0) || math.IsInf(c.Ratio, 0) {
			return fmt.Errorf("point %d: ratio %v: want a finite value > 0", i, c.Ratio)
		}
		if !(c.Fraction > 0 && c.Fraction <= 1) {
			return fmt.Errorf("point %d: fraction %v: want (0, 1]", i, c.Fraction)
		}
		if i > 0 && !(c.Ratio > pts[i-1].Ratio && c.Fraction > pts[i-1].Fraction) {
			return fmt.Errorf("point %d: ratio %v, fraction %v after %v, %v: want both rising", i, c.Ratio, c.Fraction, pts[i-1].Ratio, pts[i-1].Fraction)
		}
	}
	return nil
}

// ratioTicks labels powers of two (1/4, 1/2, 1, 2, 4, …), or of √2 on a
// narrow range, between lo and hi.
func ratioTicks(lo, hi float64) []gplot.Tick {
	var ticks []gplot.Tick
	// On a wide range (seed 002's ratios reach 10^6 both ways) label every
	// k-th power of two, at most about six labels.
	wide := math.Max(1, math.Ceil((math.Log2(hi)-math.Log2(lo))/6))
	for _, step := range []float64{wide, 0.5, 0.25} {
		ticks = ticks[:0]
		for k := math.Ceil(math.Log2(lo) / step); k*step <= math.Log2(hi); k++ {
			e := k * step
			v := math.Exp2(e)
			label := strconv.FormatFloat(v, 'g', 3, 64)
			if e >= 0 && e == math.Trunc(e) {
				label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			if e < 0 && e == math.Trunc(e) {
				label = "1/" + strconv.FormatFloat(1/v, 'g', 6, 64)
			}
			ticks = append(ticks, gplot.Tick{Value: v, Label: label})
		}
		if len(ticks) >= 3 {
			break
		}
	}
	return ticks
}
