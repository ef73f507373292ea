package rundir

import (
	"testing"
	"time"
)

type recordingMirror struct {
	steps    []int
	episodes []any
}

func (m *recordingMirror) MirrorMetrics(step int, values map[string]float64) {
	m.steps = append(m.steps, step)
}

func (m *recordingMirror) MirrorEpisode(v any) { m.episodes = append(m.episodes, v) }

// TestMirror: a mirror sees each record once it is in its stream, and none that was refused.
func TestMirror(t *testing.T) {
	d, err := Create(t.TempDir(), "sft", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m := &recordingMirror{}
	if err := d.LogMetrics(0, map[string]float64{"a": 1}); err != nil {
		t.Fatal(err)
	}
	d.SetMirror(m)
	if err := d.LogMetrics(1, map[string]float64{"a": 2}); err != nil {
		t.Fatal(err)
	}
	if err := d.LogMetrics(2, map[string]float64{StepKey: 2}); err == nil {
		t.Fatal("a metric named step was accepted")
	}
	if err := d.LogEpisode(map[string]any{"rollout": 0}); err != nil {
		t.Fatal(err)
	}
	if err := d.LogEpisode(func() {}); err == nil {
		t.Fatal("an episode that is not JSON was accepted")
	}
	d.SetMirror(nil)
	if err := d.LogMetrics(3, map[string]float64{"a": 3}); err != nil {
		t.Fatal(err)
	}
	if len(m.steps) != 1 || m.steps[0] != 1 || len(m.episodes) != 1 {
		t.Errorf("mirrored steps %v, episodes %v; want [1] and one episode", m.steps, m.episodes)
	}
}
