package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart is drawn by hand with image/draw; text uses the 7×13 bitmap
// face of golang.org/x/image/font/basicfont.
const (
	chartW, chartH = 1200, 600
	panelTop       = 80
	panelBottom    = 480
)

var (
	colWhite   = color.RGBA{255, 255, 255, 255}
	colText    = color.RGBA{30, 30, 30, 255}
	colGrid    = color.RGBA{225, 225, 225, 255}
	colAxis    = color.RGBA{120, 120, 120, 255}
	colHerald  = color.RGBA{46, 117, 182, 255}
	colTarget  = color.RGBA{200, 60, 50, 255}
	colP50     = color.RGBA{120, 180, 230, 255}
	colP95     = color.RGBA{46, 117, 182, 255}
	colP99     = color.RGBA{20, 55, 110, 255}
	colCeiling = color.RGBA{0, 0, 0, 255}
)

// canvas is an RGBA image with the few drawing operations the chart needs.
type canvas struct{ img *image.RGBA }

func (c canvas) rect(x0, y0, x1, y1 int, col color.Color) {
	draw.Draw(c.img, image.Rect(x0, y0, x1, y1), image.NewUniform(col), image.Point{}, draw.Src)
}

func (c canvas) hline(x0, x1, y int, col color.Color) { c.rect(x0, y, x1, y+1, col) }

func (c canvas) vline(x, y0, y1 int, col color.Color) { c.rect(x, y0, x+1, y1, col) }

// dashed draws a horizontal dashed line two pixels thick.
func (c canvas) dashed(x0, x1, y int, col color.Color) {
	for x := x0; x < x1; x += 10 {
		c.rect(x, y-1, min(x+6, x1), y+1, col)
	}
}

// text draws s with its baseline at y, starting at x.
func (c canvas) text(x, y int, s string, col color.Color) {
	d := font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// textCenter draws s centred on x.
func (c canvas) textCenter(x, y int, s string, col color.Color) {
	c.text(x-textWidth(s)/2, y, s, col)
}

// bold draws s twice, one pixel apart.
func (c canvas) bold(x, y int, s string, col color.Color) {
	c.text(x, y, s, col)
	c.text(x+1, y, s, col)
}

func textWidth(s string) int { return font.MeasureString(basicfont.Face7x13, s).Round() }

// drawChart renders the report: the throughput ratio per shape on the left,
// Herald's latency percentiles on the right.
func drawChart(rep *Report) *image.RGBA {
	c := canvas{img: image.NewRGBA(image.Rect(0, 0, chartW, chartH))}
	c.rect(0, 0, chartW, chartH, colWhite)
	c.bold(30, 30, fmt.Sprintf("Herald vs the bare Temporal shape (1 SignalWithStart + 1 activity per event) - %s, %d CPUs",
		rep.Started.Format("2006-01-02 15:04 UTC"), rep.CPUs), colText)
	server := rep.Server.Settings
	if server == "" {
		server = "server settings not recorded"
	}
	c.text(30, 50, "Temporal "+server+"; one run, same machine; throughput in deliveries (D: 3 per event).", colAxis)
	drawRatios(c, rep, 60, 560)
	drawLatencies(c, rep, 660, 1170)
	return c.img
}

// pairs returns the Herald measurements of burst shapes with their ceilings
// (not of shapes measured against the floor only).
func pairs(rep *Report) (herald, ceiling []Measurement) {
	ceil := map[string]Measurement{}
	for _, m := range rep.Measurements {
		if m.System == SystemCeiling {
			ceil[m.Shape.Name] = m
		}
	}
	for _, m := range rep.Measurements {
		if m.System == SystemHerald && m.Shape.Rate == 0 && !m.Shape.FloorOnly && !m.Shape.HeraldOnly {
			herald = append(herald, m)
			ceiling = append(ceiling, ceil[m.Shape.Name])
		}
	}
	return herald, ceiling
}

func drawRatios(c canvas, rep *Report, x0, x1 int) {
	c.bold(x0, panelTop-12, "Throughput: Herald / ceiling (same shape)", colText)
	herald, ceiling := pairs(rep)
	top := 3.5
	for _, m := range herald {
		top = math.Max(top, m.Ratio*1.15)
	}
	top = math.Ceil(top)
	y := func(v float64) int { return panelBottom - int(v/top*float64(panelBottom-panelTop)) }
	step := math.Max(1, math.Ceil(top/8))
	for v := 0.0; v <= top; v += step {
		c.hline(x0, x1, y(v), colGrid)
		c.text(x0-30, y(v)+4, fmt.Sprintf("%gx", v), colAxis)
	}
	c.dashed(x0, x1, y(1), colAxis)
	c.text(x1+4, y(1)+4, "1x", colAxis)
	c.dashed(x0, x1, y(3), colTarget)
	c.text(x1+4, y(3)+4, "3x A", colTarget)
	c.vline(x0, panelTop, panelBottom, colAxis)
	c.hline(x0, x1, panelBottom, colAxis)
	c.text(x0, chartH-18, "keys x events per key (x subscriptions); H = Herald, C = ceiling, deliveries/s", colAxis)
	if len(herald) == 0 {
		return
	}
	slot := (x1 - x0) / len(herald)
	barW := min(70, slot/2)
	for i, m := range herald {
		cx := x0 + slot*i + slot/2
		c.rect(cx-barW/2, y(m.Ratio), cx+barW/2, panelBottom, colHerald)
		c.textCenter(cx, y(m.Ratio)-6, fmt.Sprintf("%.2fx", m.Ratio), colText)
		c.textCenter(cx, panelBottom+18, "shape "+m.Shape.Name, colText)
		c.textCenter(cx, panelBottom+34, compactShape(m.Shape), colAxis)
		c.textCenter(cx, panelBottom+50, fmt.Sprintf("H %.0f/s", m.PerSecond), colHerald)
		c.textCenter(cx, panelBottom+66, fmt.Sprintf("C %.0f/s", ceiling[i].PerSecond), colAxis)
	}
}

func drawLatencies(c canvas, rep *Report, x0, x1 int) {
	c.bold(x0, panelTop-12, "Herald publish -> delivery latency (log scale)", colText)
	var ms []Measurement
	ceil := map[string]Measurement{}
	hi := 1000.0
	for _, m := range rep.Measurements {
		if m.System == SystemHerald {
			ms = append(ms, m)
			hi = math.Max(hi, m.LatencyMS.P99)
		} else if m.System == SystemCeiling {
			ceil[m.Shape.Name] = m
		}
	}
	lo := 10.0
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	y := func(v float64) int {
		v = math.Min(math.Max(v, lo), hi)
		return panelBottom - int(math.Log10(v/lo)/math.Log10(hi/lo)*float64(panelBottom-panelTop))
	}
	for v := lo; v <= hi; v *= 10 {
		c.hline(x0, x1, y(v), colGrid)
		c.text(x0-44, y(v)+4, durationLabel(v), colAxis)
	}
	c.vline(x0, panelTop, panelBottom, colAxis)
	c.hline(x0, x1, panelBottom, colAxis)
	legend := []struct {
		name string
		col  color.Color
	}{{"p50", colP50}, {"p95", colP95}, {"p99", colP99}}
	ly := chartH - 30
	for i, l := range legend {
		c.rect(x0+10+i*60, ly-11, x0+22+i*60, ly+1, l.col)
		c.text(x0+26+i*60, ly, l.name, colText)
	}
	c.rect(x0+190, ly-6, x0+210, ly-4, colCeiling)
	c.text(x0+214, ly, "ceiling p50 (same shape)", colText)
	if len(ms) == 0 {
		return
	}
	slot := (x1 - x0) / len(ms)
	barW := min(22, slot/4)
	for i, m := range ms {
		cx := x0 + slot*i + slot/2
		for j, v := range []float64{m.LatencyMS.P50, m.LatencyMS.P95, m.LatencyMS.P99} {
			bx := cx + (j-1)*barW - barW/2
			c.rect(bx, y(v), bx+barW-2, panelBottom, legend[j].col)
		}
		if cm, ok := ceil[m.Shape.Name]; ok && cm.Delivered > 0 {
			c.rect(cx-barW*3/2-4, y(cm.LatencyMS.P50)-1, cx+barW*3/2+2, y(cm.LatencyMS.P50)+1, colCeiling)
		}
		name := "shape " + m.Shape.Name
		if m.Shape.Rate > 0 {
			name = fmt.Sprintf("steady %g/s", m.Shape.Rate)
		}
		c.textCenter(cx, panelBottom+18, name, colText)
		c.textCenter(cx, panelBottom+34, "p50 "+durationLabel(m.LatencyMS.P50), colAxis)
		c.textCenter(cx, panelBottom+50, "p99 "+durationLabel(m.LatencyMS.P99), colAxis)
	}
}

// durationLabel writes milliseconds as "40ms", "1.5s", "100s", "15m".
func durationLabel(ms float64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	case ms < 600000:
		return fmt.Sprintf("%.3gs", ms/1000)
	default:
		return fmt.Sprintf("%.3gm", ms/60000)
	}
}

// compactShape writes a shape as "200x5" or "200x5x3 subs".
func compactShape(s Shape) string {
	out := fmt.Sprintf("%dx%d", s.Keys, s.EventsPerKey)
	if s.Subscriptions > 1 {
		out += fmt.Sprintf("x%d subs", s.Subscriptions)
	}
	return out
}

// drawSuite stacks the charts of the suite's runs, one below the other.
func drawSuite(suite *Suite) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH*max(1, len(suite.Runs))))
	for i, rep := range suite.Runs {
		draw.Draw(img, image.Rect(0, i*chartH, chartW, (i+1)*chartH), drawChart(rep), image.Point{}, draw.Src)
	}
	return img
}

// writePNG renders the charts of the suite to path.
func writePNG(path string, suite *Suite) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := encodeChart(f, suite); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func encodeChart(w io.Writer, suite *Suite) error {
	if err := png.Encode(w, drawSuite(suite)); err != nil {
		return fmt.Errorf("encode chart: %w", err)
	}
	return nil
}
