package rundir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLogMetricsLineFormat(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	tests := []struct {
		step   int
		values map[string]float64
		want   string
	}{
		{0, nil, `{"step":0}`},
		{1, map[string]float64{"loss": 0.5, "kl": 1e-30, "reward/actor/mean": -2}, `{"step":1,"kl":1e-30,"loss":0.5,"reward/actor/mean":-2}`},
		{2, map[string]float64{"a": math.NaN(), "b": math.Inf(1), "c": math.Inf(-1)}, `{"step":2,"a":"NaN","b":"+Inf","c":"-Inf"}`},
	}
	var want strings.Builder
	for _, tt := range tests {
		if err := d.LogMetrics(tt.step, tt.values); err != nil {
			t.Fatal(err)
		}
		want.WriteString(tt.want + "\n")
	}
	got, _ := os.ReadFile(d.MetricsPath())
	if string(got) != want.String() {
		t.Errorf("metrics.jsonl:\n%s\nwant:\n%s", got, want.String())
	}
	recs, err := ReadMetrics(d.MetricsPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[1]["loss"] != 0.5 || recs[1]["kl"] != 1e-30 || recs[2]["step"] != 2.0 {
		t.Errorf("records %v", recs)
	}
	if a, b, c := recs[2]["a"].(float64), recs[2]["b"].(float64), recs[2]["c"].(float64); !math.IsNaN(a) || !math.IsInf(b, 1) || !math.IsInf(c, -1) {
		t.Errorf("non-finite values read back as %v %v %v", a, b, c)
	}
	if names := MetricNames(recs); strings.Join(names, ",") != "a,b,c,kl,loss,reward/actor/mean" {
		t.Errorf("names %v", names)
	}
	for _, bad := range []struct {
		step   int
		values map[string]float64
	}{{-1, nil}, {3, map[string]float64{"step": 1}}, {3, map[string]float64{"": 1}}} {
		if err := d.LogMetrics(bad.step, bad.values); err == nil {
			t.Errorf("LogMetrics(%d, %v) succeeded", bad.step, bad.values)
		}
	}
}

func TestReadMetricsErrors(t *testing.T) {
	tests := []struct {
		name, content, msg string
		n                  int
	}{
		{"empty", "", "", 0},
		{"blank lines", "\n{\"step\":1}\n\n", "", 1},
		{"partial last line ignored", "{\"step\":1}\n{\"step\":2,\"lo", "", 1},
		{"bad json", "{\"step\":1}\n{oops}\n", ":2: invalid character", 0},
		{"no step", "{\"loss\":1}\n", `:1: record has no numeric "step"`, 0},
		{"not an object", "[1]\n", ":1: json: cannot unmarshal array", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), MetricsFile)
			os.WriteFile(path, []byte(tt.content), 0o644)
			recs, err := ReadMetrics(path)
			if tt.msg == "" {
				if err != nil || len(recs) != tt.n {
					t.Errorf("got %d records, %v; want %d", len(recs), err, tt.n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want %q", err, tt.msg)
			}
		})
	}
	if _, err := ReadMetrics(filepath.Join(t.TempDir(), "none.jsonl")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
}

// TestPartialLineRepaired simulates crashes in the middle of appending a
// record: reopening the run cuts the partial line, and the next record
// starts on a line of its own.
func TestPartialLineRepaired(t *testing.T) {
	tests := []struct {
		name, tail string
		file       string
	}{
		{"half a record", `{"step":2,"loss":0.`, MetricsFile},
		{"zeros after power loss", "\x00\x00\x00\x00\x00\x00\x00\x00", MetricsFile},
		{"event", `{"time":"2026-11-30T03:45:13Z","ty`, EventsFile},
		{"episode", `{"rollout":3,"text":"unfinis`, EpisodesFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustCreate(t, t.TempDir())
			d.LogMetrics(0, map[string]float64{"loss": 1})
			d.LogMetrics(1, map[string]float64{"loss": 0.75})
			d.LogEvent(Event{Time: t0, Type: EventRunStart, Version: 1})
			d.LogEpisode(map[string]any{"rollout": 0, "text": "ok"})
			path := d.Path()
			d.Close()
			file := filepath.Join(path, tt.file)
			before, _ := os.ReadFile(file)
			f, _ := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString(tt.tail)
			f.Close()

			d, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			after, _ := os.ReadFile(file)
			if !bytes.Equal(after, before) {
				t.Errorf("after Open:\n%q\nwant:\n%q", after, before)
			}
			notes := d.Notes()
			if len(notes) != 1 || !strings.Contains(notes[0], fmt.Sprintf("%s: removed a partial last line (%d bytes)", tt.file, len(tt.tail))) {
				t.Errorf("notes %q", notes)
			}
			d.LogMetrics(2, map[string]float64{"loss": 0.5})
			d.LogEvent(Event{Time: t0, Type: EventRunResume, Rollout: 1})
			d.LogEpisode(map[string]any{"rollout": 1})
			if recs, err := ReadMetrics(d.MetricsPath()); err != nil || len(recs) != 3 {
				t.Errorf("metrics after resume: %d records, %v", len(recs), err)
			}
			if evs, err := ReadEvents(d.EventsPath()); err != nil || len(evs) != 2 {
				t.Errorf("events after resume: %d, %v", len(evs), err)
			}
			if eps, err := ReadEpisodes(d.EpisodesPath()); err != nil || len(eps) != 2 {
				t.Errorf("episodes after resume: %d, %v", len(eps), err)
			}
		})
	}
}

func TestTruncatePartialLine(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // longer than the backward scan's block
	tests := []struct{ content, want string }{
		{"", ""},
		{"a\n", "a\n"},
		{"a\nb", "a\n"},
		{"partial", ""},
		{"a\n" + long, "a\n"},
		{long + "\n" + long, long + "\n"},
	}
	for i, tt := range tests {
		path := filepath.Join(t.TempDir(), "f")
		os.WriteFile(path, []byte(tt.content), 0o644)
		n, err := truncatePartialLine(path)
		got, _ := os.ReadFile(path)
		if err != nil || string(got) != tt.want || n != int64(len(tt.content)-len(tt.want)) {
			t.Errorf("case %d: kept %d bytes, removed %d, %v; want %d bytes", i, len(got), n, err, len(tt.want))
		}
	}
}

// TestResumeWritesTheSameMetrics runs "training" for 10 steps, and again
// with a crash after step 7 (a partial line) and a resume from the
// checkpoint taken after step 5: the metrics files must be identical.
func TestResumeWritesTheSameMetrics(t *testing.T) {
	metric := func(step int) map[string]float64 {
		return map[string]float64{"loss": 1 / float64(step+1), "reward/actor/mean": math.Sin(float64(step))}
	}
	whole := mustCreate(t, t.TempDir())
	for s := range 10 {
		whole.LogMetrics(s, metric(s))
	}
	want, _ := os.ReadFile(whole.MetricsPath())

	d := mustCreate(t, t.TempDir())
	for s := range 8 {
		d.LogMetrics(s, metric(s))
	}
	path := d.Path()
	d.Close()
	f, _ := os.OpenFile(filepath.Join(path, MetricsFile), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"step":8,"lo`)
	f.Close()

	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.TruncateMetricsAfter(5); err != nil {
		t.Fatal(err)
	}
	for s := 6; s < 10; s++ {
		d.LogMetrics(s, metric(s))
	}
	got, _ := os.ReadFile(d.MetricsPath())
	if !bytes.Equal(got, want) {
		t.Errorf("resumed metrics:\n%s\nwant:\n%s", got, want)
	}
}

func TestTruncateAfter(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	for s := range 6 {
		d.LogMetrics(s, map[string]float64{"x": float64(s)})
		d.LogEpisode(map[string]any{"rollout": s / 2, "i": s})
	}
	d.LogEpisode(map[string]any{"note": "no rollout field"})
	steps := func() []float64 {
		recs, err := ReadMetrics(d.MetricsPath())
		if err != nil {
			t.Fatal(err)
		}
		var s []float64
		for _, r := range recs {
			s = append(s, r["step"].(float64))
		}
		return s
	}
	for _, tt := range []struct {
		after int
		want  string
	}{{10, "[0 1 2 3 4 5]"}, {3, "[0 1 2 3]"}, {3, "[0 1 2 3]"}, {-1, "[]"}} {
		if err := d.TruncateMetricsAfter(tt.after); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(steps()); got != tt.want {
			t.Errorf("after %d: steps %s, want %s", tt.after, got, tt.want)
		}
	}
	// The writer goes on appending to the rewritten file.
	d.LogMetrics(0, map[string]float64{"x": 9})
	if got := fmt.Sprint(steps()); got != "[0]" {
		t.Errorf("append after truncation: steps %s", got)
	}
	if err := d.TruncateEpisodesAfter(1); err != nil {
		t.Fatal(err)
	}
	eps, _ := ReadEpisodes(d.EpisodesPath())
	if len(eps) != 5 || eps[4]["note"] == nil {
		t.Errorf("episodes after truncation: %v", eps)
	}
}

func TestTruncateMetricsRejectsBadRecords(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	d.LogMetrics(0, nil)
	d.metrics.Append(map[string]any{"loss": 1})
	if err := d.TruncateMetricsAfter(0); err == nil || !strings.Contains(err.Error(), `:2: missing field "step"`) {
		t.Errorf("error %v", err)
	}
}

func TestConcurrentAppendsStayWhole(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				d.LogMetrics(g*1000+i, map[string]float64{"long/metric/name/" + strings.Repeat("k", 100): float64(i)})
			}
		})
	}
	wg.Wait()
	recs, err := ReadMetrics(d.MetricsPath())
	if err != nil || len(recs) != 800 {
		t.Errorf("%d records, %v", len(recs), err)
	}
}

func TestWriterClosed(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	d.Close()
	if err := d.LogMetrics(0, nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("LogMetrics after Close: %v", err)
	}
	if _, err := d.BeginCheckpoint(0); err == nil {
		t.Error("BeginCheckpoint after Close succeeded")
	}
}

func TestWriterKeepsOneRecordPerLine(t *testing.T) {
	w, err := OpenWriter(filepath.Join(t.TempDir(), "x.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// A value whose JSON spans lines (an indented RawMessage) is compacted.
	if err := w.Append(json.RawMessage("{\n  \"a\": 1,\n  \"b\": \"x\\ny\"\n}")); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(math.NaN()); err == nil {
		t.Error("Append(NaN) succeeded")
	}
	got, _ := os.ReadFile(w.Path())
	if string(got) != "{\"a\":1,\"b\":\"x\\ny\"}\n" {
		t.Errorf("file %q", got)
	}
}
