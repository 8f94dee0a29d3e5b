package faults

import (
	"fmt"
	"image/color"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plot shows throughput, ok operations per second by operation, over
// the run, with every nemesis window shaded and labelled and the phases
// marked: the picture Jepsen draws, where a fault's effect and the
// recovery after its heal can be seen at a glance.

// Plot geometry and look.
const (
	plotWidth    = 14 * vg.Inch
	plotHeight   = 6 * vg.Inch
	plotBucketNs = nsPerS // throughput is counted per second
	// labelRows staggers the window labels, so those of windows that
	// start close together do not print over each other.
	labelRows = 3
	// headroom leaves space above the highest line for the legend.
	headroom = 1.25
)

var (
	shadeColor       = color.NRGBA{R: 0x50, G: 0x80, B: 0xd0, A: 0x38}
	shadeBeyondColor = color.NRGBA{R: 0xe0, G: 0x50, B: 0x40, A: 0x40}
	phaseColor       = color.NRGBA{R: 0x40, G: 0x40, B: 0x40, A: 0xff}
	labelPad         = vg.Points(3)
	// opColors gives each operation one color in every plot, so plots of
	// different runs compare at a glance; otherColor is for the rest.
	opColors = map[string]color.Color{
		FEnqueue:  color.NRGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		FClaim:    color.NRGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		FRenew:    color.NRGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
		FUpdate:   color.NRGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		FComplete: color.NRGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		FFail:     color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		FSnooze:   color.NRGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		FCancel:   color.NRGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
		FGet:      color.NRGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
		// FGroupCancel: otherColor's teal is the rest's; a dark one.
		FGroupCancel: color.NRGBA{R: 0x0b, G: 0x3d, B: 0x5c, A: 0xff},
	}
	otherColor = color.NRGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}
)

// WritePlot writes a PNG of the run's throughput (ok ops/s by operation;
// claims only when they got a task) over time, with the nemesis windows
// shaded (red for those beyond the bounds) and labelled, and the phases
// drawn as dashed lines.
func WritePlot(in *Input, path string) error {
	h := digest(in)
	p, err := throughputPlot(h)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	wt, err := p.WriterTo(plotWidth, plotHeight, "png")
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func throughputPlot(h *history) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("skuldd %s, seed %d: ok operations per second", h.in.Run.Scenario, h.in.Run.Seed)
	p.X.Label.Text = "time since the run began (s)"
	p.Y.Label.Text = "ok ops/s"
	p.X.Min, p.X.Max = 0, seconds(h.tEnd)
	p.Y.Min = 0
	p.Legend.Top = true
	label := p.X.Tick.Label
	label.XAlign, label.YAlign = text.XLeft, text.YBottom
	p.Add(shades{windows: h.windows, phases: h.phases, label: label})
	series, peak := throughput(h)
	for _, s := range series {
		line, err := plotter.NewLine(s.xys)
		if err != nil {
			return nil, fmt.Errorf("series %s: %w", s.f, err)
		}
		line.Color = otherColor
		if c, ok := opColors[s.f]; ok {
			line.Color = c
		}
		line.Width = vg.Points(1)
		p.Add(line)
		p.Legend.Add(s.f, line)
	}
	p.Y.Max = max(1, float64(peak)*headroom)
	return p, nil
}

// series is one operation's ok count per bucket.
type series struct {
	f   string
	xys plotter.XYs
}

// throughput counts ok operations per bucket of their ok's time, per
// operation in a fixed order, and returns the highest count.
func throughput(h *history) ([]series, int) {
	buckets := int(h.tEnd/plotBucketNs) + 1
	counts := map[string][]int{}
	for _, o := range h.ops {
		if !o.ok() || o.f == FClaim && o.task == "" {
			continue
		}
		if counts[o.f] == nil {
			counts[o.f] = make([]int, buckets)
		}
		counts[o.f][o.tc/plotBucketNs]++
	}
	var names []string
	for f := range counts {
		names = append(names, f)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := rank(opNames, a) - rank(opNames, b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	peak := 0
	out := make([]series, 0, len(names))
	for _, f := range names {
		xys := make(plotter.XYs, buckets)
		for i, n := range counts[f] {
			xys[i] = plotter.XY{X: seconds(int64(i) * plotBucketNs), Y: float64(n)}
			peak = max(peak, n)
		}
		out = append(out, series{f: f, xys: xys})
	}
	return out, peak
}

func seconds(ns int64) float64 { return float64(ns) / float64(nsPerS) }

// shades draws the nemesis windows and the phases behind the lines.
type shades struct {
	windows []window
	phases  []*Event
	label   text.Style
}

// Plot implements plot.Plotter.
func (s shades) Plot(c draw.Canvas, plt *plot.Plot) {
	x, _ := plt.Transforms(&c)
	rowHeight := s.label.Height("M") + labelPad
	for i, w := range s.windows {
		x0, x1 := x(seconds(w.start)), x(seconds(w.stop))
		fill := shadeColor
		if w.beyond {
			fill = shadeBeyondColor
		}
		c.FillPolygon(fill, c.ClipPolygonX([]vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}}))
		name := w.nemesis
		if len(w.targets) > 0 {
			name += fmt.Sprint(w.targets)
		}
		if w.beyond {
			name += " (beyond bounds)"
		}
		y := c.Min.Y + labelPad + vg.Length(i%labelRows)*rowHeight
		c.FillText(s.label, vg.Point{X: x0 + labelPad, Y: y}, name)
	}
	dashed := draw.LineStyle{Color: phaseColor, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	top := s.label
	top.YAlign = text.YTop
	for _, p := range s.phases {
		px := x(seconds(p.TNs))
		c.StrokeLine2(dashed, px, c.Min.Y, px, c.Max.Y)
		c.FillText(top, vg.Point{X: px + labelPad, Y: c.Max.Y - labelPad}, p.F)
	}
}
