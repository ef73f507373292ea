package main

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"stx.dev/stx/engine"
	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/schema"
)

// plotDPI maps the --width/--height pixels to the plot library's lengths;
// 96 is the resolution browsers assume for CSS pixels, so the SVG shows at
// the size the PNG has.
const plotDPI = 96

func plotCommand() *cli.Command {
	return &cli.Command{
		Name:      "plot",
		Usage:     "draw a run's reward, loss, KL and validation curves (PNG or SVG)",
		ArgsUsage: "RUN_DIR",
		Description: `plot reads RUN_DIR/metrics.jsonl and draws one panel per kind of metric
(reward, loss, KL, validation; keys containing "reward", "loss", "kl" or
"val/"), one line per key, against the training step. --metrics picks the
keys instead. The output format follows the extension: .png or .svg.
RUN_DIR may also be a metrics file itself.

Examples:
   stx plot runs/grpo-20261130-034513
   stx plot runs/grpo-20261130-034513 -o curves.svg --metrics reward/actor/mean,loss`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "the image `FILE` (.png or .svg; default RUN_DIR/plot.png)"},
			&cli.StringSliceFlag{Name: "metrics", Aliases: []string{"m"}, Usage: "the metric `KEYS` to draw, comma-separated or repeated (default: every reward, loss, KL and val/ key)"},
			&cli.IntFlag{Name: "width", Value: 1000, Usage: "image width in `PIXELS`"},
			&cli.IntFlag{Name: "height", Usage: "image height in `PIXELS` (default: 280 per panel)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("plot takes one run directory, got %d arguments", c.NArg())
			}
			metricsPath, defaultOut, err := plotInput(c.Args().First())
			if err != nil {
				return err
			}
			out := c.String("output")
			if out == "" {
				out = defaultOut
			}
			format := strings.ToLower(filepath.Ext(out))
			if format != ".png" && format != ".svg" {
				return usagef("cannot write %q: the output must end in .png or .svg", out)
			}
			records, err := rundir.ReadMetrics(metricsPath)
			if err != nil {
				return err
			}
			if len(records) == 0 {
				return fmt.Errorf("%s holds no metrics yet", metricsPath)
			}
			// The app keeps commas inside flag values (--set takes CUE lists),
			// so split the comma-separated metric list here.
			var wanted []string
			for _, m := range c.StringSlice("metrics") {
				for _, k := range strings.Split(m, ",") {
					if k = strings.TrimSpace(k); k != "" {
						wanted = append(wanted, k)
					}
				}
			}
			keys, err := plotKeys(records, wanted, metricsPath)
			if err != nil {
				return err
			}
			panels, skipped := plotPanels(records, keys)
			// A run directory's recipe names its family's objective: drawn first, and
			// reported as first → last (explicit --metrics draw only what they name).
			var objLine string
			if len(wanted) == 0 {
				if o, ok := runObjective(metricsPath); ok {
					if first, last, ok := o.Measure(records); ok {
						if p, _ := plotPanels(records, []string{o.Key}); len(p) == 1 {
							p[0].title = "objective: " + o.Name
							panels = append(p, panels...)
						}
						objLine = fmt.Sprintf("objective: %s (%s, %s)\n", o.Format(first, last), o.Key, o.Span(records))
					}
				}
			}
			for _, s := range skipped {
				fmt.Fprintf(c.App.ErrWriter, "stx plot: %s\n", s)
			}
			if len(panels) == 0 {
				return fmt.Errorf("%s: none of %s has a finite value to draw", metricsPath, strings.Join(keys, ", "))
			}
			width, height := c.Int("width"), c.Int("height")
			if height == 0 {
				height = 280 * len(panels)
			}
			if width < 200 || height < 150 || width > 20000 || height > 20000 {
				return usagef("image size %dx%d: want 200 to 20000 pixels wide and 150 to 20000 high", width, height)
			}
			img, err := renderPlot(panels, width, height, format)
			if err != nil {
				return fmt.Errorf("plot %s: %w", metricsPath, err)
			}
			if err := os.WriteFile(out, img, 0o644); err != nil {
				return fmt.Errorf("plot: %w", err)
			}
			curves := 0
			titles := make([]string, len(panels))
			for i, p := range panels {
				curves += len(p.series)
				titles[i] = p.title
			}
			fmt.Fprintf(c.App.Writer, "wrote %s: %s in %s (%s), %s\n", out, plural(curves, "curve"),
				plural(len(panels), "panel"), strings.Join(titles, ", "), plural(len(records), "record"))
			fmt.Fprint(c.App.Writer, objLine)
			return nil
		},
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// runObjective is the objective of the recipe recorded beside a metrics file (the run
// directory's config.cue); ok is false without one.
func runObjective(metricsPath string) (engine.Objective, bool) {
	cfg := filepath.Join(filepath.Dir(metricsPath), rundir.ConfigFile)
	if _, err := os.Stat(cfg); err != nil {
		return engine.Objective{}, false
	}
	cat, err := engine.Load([]string{cfg}, schema.Options{})
	if err != nil || len(cat.Names) != 1 {
		return engine.Objective{}, false
	}
	return engine.ObjectiveFor(cat.Recipes[cat.Names[0]]), true
}

// plotInput resolves RUN_DIR to its metrics file and the default output.
func plotInput(arg string) (metrics, out string, err error) {
	st, err := os.Stat(arg)
	if err != nil {
		return "", "", fmt.Errorf("plot: %w", err)
	}
	if !st.IsDir() {
		return arg, filepath.Join(filepath.Dir(arg), "plot.png"), nil
	}
	metrics = filepath.Join(arg, rundir.MetricsFile)
	if _, err := os.Stat(metrics); errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("%s has no %s: is it a run directory?", arg, rundir.MetricsFile)
	}
	return metrics, filepath.Join(arg, "plot.png"), nil
}

// plotCategories are the panels drawn by default, in order, each with the
// substring that puts a key in it. A key goes to the first that matches:
// "val/reward" is validation and "loss/kl" is KL.
var plotCategories = []struct{ title, match string }{
	{"validation", "val/"},
	{"KL", "kl"},
	{"loss", "loss"},
	{"reward", "reward"},
}

// plotPanelOrder is the top-to-bottom order of the default panels.
var plotPanelOrder = []string{"reward", "loss", "KL", "validation"}

// plotCategory is the panel of a key; keys of no category get their own.
func plotCategory(key string) string {
	lower := strings.ToLower(key)
	for _, c := range plotCategories {
		if strings.Contains(lower, c.match) {
			return c.title
		}
	}
	return key
}

// plotKeys picks the metrics to draw: the requested ones, which must
// exist, or every key of a default category.
func plotKeys(records []map[string]any, requested []string, path string) ([]string, error) {
	have := rundir.MetricNames(records)
	if len(requested) > 0 {
		var keys []string
		for _, k := range requested {
			k = strings.TrimSpace(k)
			if k == "" || slices.Contains(keys, k) {
				continue
			}
			if !slices.Contains(have, k) {
				return nil, fmt.Errorf("%s has no metric %q; it has: %s", path, k, strings.Join(have, ", "))
			}
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			return nil, usagef("--metrics names no metric")
		}
		return keys, nil
	}
	var keys []string
	for _, k := range have {
		if slices.Contains(plotPanelOrder, plotCategory(k)) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s has no reward, loss, KL or val/ metrics (it has: %s); pick some with --metrics", path, strings.Join(have, ", "))
	}
	return keys, nil
}

// plotSeries is one curve.
type plotSeries struct {
	key string
	xys plotter.XYs
}

// plotPanel is one chart of the figure.
type plotPanel struct {
	title  string
	series []plotSeries
}

// plotPanels collects each key's finite (step, value) points and groups
// the curves into panels: the default categories in plotPanelOrder, then
// other keys in the order given. skipped says what was left out.
func plotPanels(records []map[string]any, keys []string) (panels []plotPanel, skipped []string) {
	index := map[string]int{}
	for _, key := range keys {
		var xys plotter.XYs
		nonFinite := 0
		for _, r := range records {
			v, ok := r[key].(float64)
			if !ok {
				continue // absent at this step, or not a number
			}
			if math.IsNaN(v) || math.IsInf(v, 0) {
				nonFinite++
				continue
			}
			xys = append(xys, plotter.XY{X: r[rundir.StepKey].(float64), Y: v})
		}
		if nonFinite > 0 {
			skipped = append(skipped, fmt.Sprintf("%s: left out %s", key, plural(nonFinite, "non-finite value")))
		}
		if len(xys) == 0 {
			skipped = append(skipped, fmt.Sprintf("%s: no finite value to draw", key))
			continue
		}
		title := plotCategory(key)
		i, ok := index[title]
		if !ok {
			i = len(panels)
			index[title] = i
			panels = append(panels, plotPanel{title: title})
		}
		panels[i].series = append(panels[i].series, plotSeries{key: key, xys: xys})
	}
	rank := func(title string) int {
		if i := slices.Index(plotPanelOrder, title); i >= 0 {
			return i
		}
		return len(plotPanelOrder)
	}
	slices.SortStableFunc(panels, func(a, b plotPanel) int { return rank(a.title) - rank(b.title) })
	return panels, skipped
}

// renderPlot draws the panels stacked vertically, sharing the step axis,
// and encodes the figure as PNG or SVG.
func renderPlot(panels []plotPanel, width, height int, format string) ([]byte, error) {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, panel := range panels {
		for _, s := range panel.series {
			for _, xy := range s.xys {
				xmin, xmax = min(xmin, xy.X), max(xmax, xy.X)
			}
		}
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, panel := range panels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "step"
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		ymin, ymax := math.Inf(1), math.Inf(-1)
		for j, s := range panel.series {
			clr := plotutil.DarkColors[j%len(plotutil.DarkColors)]
			for _, xy := range s.xys {
				ymin, ymax = min(ymin, xy.Y), max(ymax, xy.Y)
			}
			var thumbs []plot.Thumbnailer
			if len(s.xys) > 1 {
				line, err := plotter.NewLine(s.xys)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", s.key, err)
				}
				line.Color = clr
				line.Width = vg.Points(1.5)
				p.Add(line)
				thumbs = append(thumbs, line)
			}
			// Sparse curves (evaluations every few steps, a run just
			// started) get a mark at each point; a single point needs one
			// to show at all.
			if len(s.xys) <= 30 {
				sc, err := plotter.NewScatter(s.xys)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", s.key, err)
				}
				sc.Color = clr
				sc.Shape = draw.CircleGlyph{}
				sc.Radius = vg.Points(2)
				p.Add(sc)
				thumbs = append(thumbs, sc)
			}
			p.Legend.Add(s.key, thumbs...)
		}
		// Every panel spans the run's steps, so panels line up; headroom
		// above the data keeps the legend (top right) off the curves.
		p.X.Min, p.X.Max = xmin, xmax
		if span := ymax - ymin; span > 0 {
			p.Y.Min, p.Y.Max = ymin, ymax+span*0.12*float64(len(panel.series))
		}
		plots[i] = []*plot.Plot{p}
	}

	w := vg.Length(width) * vg.Inch / plotDPI
	h := vg.Length(height) * vg.Inch / plotDPI
	var canvas interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch format {
	case ".png":
		img := image.NewRGBA(image.Rect(0, 0, width, height))
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseImage(img), vgimg.UseDPI(plotDPI))} // white by default
	case ".svg":
		canvas = vgsvg.New(w, h)
	default:
		return nil, fmt.Errorf("unknown image format %q", format)
	}
	dc := draw.New(canvas)
	if format == ".svg" { // the PNG canvas starts white; SVG is transparent
		dc.SetColor(color.White)
		dc.Fill(dc.Rectangle.Path())
	}
	tiles := draw.Tiles{
		Rows: len(panels), Cols: 1,
		PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter,
		PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter,
	}
	for i, row := range plot.Align(plots, tiles, dc) {
		plots[i][0].Draw(row[0])
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
