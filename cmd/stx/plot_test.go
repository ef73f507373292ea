package main

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotutil"

	"stx.dev/stx/engine"
	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/schema"
)

// plotRun creates a run directory with 20 steps of metrics, as the engine
// writes them (the run stays open: plot reads a live run).
func plotRun(t *testing.T) string {
	t.Helper()
	d, err := rundir.Create(t.TempDir(), "grpo", time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for s := range 20 {
		m := map[string]float64{
			"reward/actor/mean": math.Sin(float64(s) / 3),
			"loss/policy":       1 / float64(s+1),
			"loss/value":        0.5 / float64(s+1),
			"kl":                0.01 * float64(s),
			"lr":                1e-6,
		}
		if s%5 == 0 {
			m["val/reward"] = float64(s) / 20
		}
		if s == 7 {
			m["loss/policy"] = math.NaN()
		}
		if err := d.LogMetrics(s, m); err != nil {
			t.Fatal(err)
		}
	}
	return d.Path()
}

func runStx(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"stx"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPlotPNG(t *testing.T) {
	dir := plotRun(t)
	out := filepath.Join(t.TempDir(), "curves.png")
	code, stdout, stderr := runStx(t, "plot", dir, "-o", out, "--width", "640", "--height", "480")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "wrote " + out + ": 5 curves in 4 panels (reward, loss, KL, validation), 20 records\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if !strings.Contains(stderr, "loss/policy: left out 1 non-finite value") {
		t.Errorf("stderr %q", stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 640 || b.Dy() != 480 {
		t.Errorf("size %dx%d, want 640x480", b.Dx(), b.Dy())
	}
	// The first curve of each panel is drawn in the first color: the
	// image must hold a good number of its pixels.
	r0, g0, b0, _ := plotutil.DarkColors[0].RGBA()
	curve := 0
	for y := range 480 {
		for x := range 640 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == r0 && g == g0 && b == b0 {
				curve++
			}
		}
	}
	if curve < 500 {
		t.Errorf("%d pixels of the curves' color, want ≥ 500", curve)
	}
}

func TestPlotDefaultOutputAndSize(t *testing.T) {
	dir := plotRun(t)
	code, stdout, stderr := runStx(t, "plot", dir, "--metrics", "kl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out := filepath.Join(dir, "plot.png")
	if !strings.HasPrefix(stdout, "wrote "+out+": 1 curve in 1 panel (KL)") {
		t.Errorf("stdout %q", stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != 1000 || cfg.Height != 280 {
		t.Errorf("default size %dx%d (%v), want 1000x280", cfg.Width, cfg.Height, err)
	}
}

func TestPlotSVG(t *testing.T) {
	dir := plotRun(t)
	out := filepath.Join(t.TempDir(), "curves.SVG")
	code, stdout, stderr := runStx(t, "plot", dir, "-o", out, "--metrics", "lr,reward/actor/mean", "--metrics", "val/reward")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "3 curves in 3 panels (reward, validation, lr)") {
		t.Errorf("stdout %q", stdout)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.HasPrefix(s, "<?xml") && !strings.HasPrefix(s, "<svg") {
		t.Errorf("not SVG: %.60q", s)
	}
	for _, want := range []string{"<svg", "reward/actor/mean", "val/reward", "</svg>"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestPlotErrors(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) string {
		dir := filepath.Join(root, name)
		os.MkdirAll(dir, 0o755)
		if content != "-" {
			os.WriteFile(filepath.Join(dir, rundir.MetricsFile), []byte(content), 0o644)
		}
		return dir
	}
	good := write("good", "{\"step\":0,\"loss\":1}\n{\"step\":1,\"loss\":0.5}\n")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no argument", nil, exitUsage, "plot takes one run directory, got 0"},
		{"two arguments", []string{good, good}, exitUsage, "got 2 arguments"},
		{"missing directory", []string{filepath.Join(root, "nope")}, exitInvalid, "no such file"},
		{"no metrics file", []string{write("nometrics", "-")}, exitInvalid, "has no metrics.jsonl: is it a run directory?"},
		{"empty metrics", []string{write("empty", "")}, exitInvalid, "holds no metrics yet"},
		{"only a partial line", []string{write("partial", `{"step":0,"lo`)}, exitInvalid, "holds no metrics yet"},
		{"bad record", []string{write("bad", "{\"step\":0}\nnot json\n")}, exitInvalid, "metrics.jsonl:2:"},
		{"no default keys", []string{write("lronly", "{\"step\":0,\"lr\":1}\n")}, exitInvalid, "has no reward, loss, KL or val/ metrics (it has: lr); pick some with --metrics"},
		{"unknown metric", []string{good, "--metrics", "loss,rewrad"}, exitInvalid, `has no metric "rewrad"; it has: loss`},
		{"only NaN", []string{write("nan", "{\"step\":0,\"loss\":\"NaN\"}\n")}, exitInvalid, "none of loss has a finite value"},
		{"gif", []string{good, "-o", filepath.Join(root, "x.gif")}, exitUsage, "must end in .png or .svg"},
		{"too small", []string{good, "--width", "10"}, exitUsage, "image size 10x280"},
		{"unwritable output", []string{good, "-o", filepath.Join(root, "no", "dir", "x.png")}, exitInvalid, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runStx(t, append([]string{"plot"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.msg)
			}
		})
	}
}

func TestPlotCategory(t *testing.T) {
	for key, want := range map[string]string{
		"reward/actor/mean": "reward",
		"loss/policy":       "loss",
		"loss/kl":           "KL",
		"KL/mean":           "KL",
		"val/reward":        "validation",
		"val/loss":          "validation",
		"lr":                "lr",
		"grad_norm":         "grad_norm",
	} {
		if got := plotCategory(key); got != want {
			t.Errorf("plotCategory(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestPlotPanels(t *testing.T) {
	records := []map[string]any{
		{"step": 0.0, "val/acc": 0.5, "loss": 2.0, "reward": 0.1, "note": "text"},
		{"step": 1.0, "loss": math.Inf(1), "reward": 0.2, "note": 3.0},
		{"step": 2.0, "loss": 1.0, "reward": 0.3},
	}
	panels, skipped := plotPanels(records, []string{"note", "val/acc", "loss", "reward"})
	var got []string
	for _, p := range panels {
		for _, s := range p.series {
			got = append(got, fmt.Sprintf("%s:%s:%v", p.title, s.key, s.xys))
		}
	}
	want := []string{
		"reward:reward:[{0 0.1} {1 0.2} {2 0.3}]",
		"loss:loss:[{0 2} {2 1}]",
		"validation:val/acc:[{0 0.5}]",
		"note:note:[{1 3}]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("panels\n%v\nwant\n%v", got, want)
	}
	if fmt.Sprint(skipped) != "[loss: left out 1 non-finite value]" {
		t.Errorf("skipped %v", skipped)
	}
}

// TestPlotObjective: a run directory's recipe names its family's objective, which the plot
// draws in its first panel and reports as first → last (a DPO run: preference accuracy).
func TestPlotObjective(t *testing.T) {
	cat, err := engine.Load([]string{filepath.Join("..", "..", "recipes.cue")}, schema.Options{Only: "dpo"})
	if err != nil {
		t.Fatal(err)
	}
	text, err := schema.Format(cat.Recipes["dpo"], "cue")
	if err != nil {
		t.Fatal(err)
	}
	d, err := rundir.Create(t.TempDir(), "dpo", time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.WriteRecipe(1, text); err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= 30; s++ {
		if err := d.LogMetrics(s, map[string]float64{"policy/loss": 0.7, "policy/accuracy": float64(s) / 30}); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "curves.png")
	code, stdout, stderr := runStx(t, "plot", d.Path(), "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"2 panels (objective: preference accuracy, loss)",
		"objective: preference accuracy 0.183 → 0.850 (policy/accuracy, means of the first and last 10 steps)\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout %q lacks %q", stdout, want)
		}
	}
}
