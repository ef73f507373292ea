package rundir

import (
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestEventsRoundTrip(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	events := []Event{
		{Time: t0, Type: EventRunStart, Version: 1},
		{Time: t0, Type: EventReloadApplied, Rollout: 3, Version: 2, Changes: []Change{{Knob: "lr", Old: 1e-6, New: 3e-6}, {Knob: "lr_schedule", Old: "constant", New: "cosine"}}},
		{Time: t0, Type: EventReloadRefused, Rollout: 4, Message: "roles changed: restart the run"},
		{Time: t0, Type: EventReloadInvalid, Rollout: 4, Message: "recipes.cue:3:9: knobs.lr: invalid value -1"},
		{Time: t0, Type: EventCheckpointSaved, Rollout: 5, Checkpoint: "checkpoints/000005"},
		{Time: t0, Type: EventEval, Rollout: 5, Metrics: map[string]float64{"val/reward": 0.25}},
		{Time: t0, Type: EventNaNDetected, Rollout: 6, Message: "loss", Metrics: map[string]float64{"loss": math.NaN(), "grad_norm": math.Inf(1)}},
		{Time: t0, Type: EventRunEnd, Rollout: 7, Message: "completed"},
	}
	for _, e := range events {
		if err := d.LogEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadEvents(d.EventsPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(events) {
		t.Fatalf("%d events, want %d", len(got), len(events))
	}
	nan := got[6].Metrics["loss"]
	if !math.IsNaN(nan) || !math.IsInf(got[6].Metrics["grad_norm"], 1) {
		t.Errorf("nan_detected metrics %v", got[6].Metrics)
	}
	got[6].Metrics, events[6].Metrics = nil, nil
	if !reflect.DeepEqual(got, events) {
		t.Errorf("events read back:\n%+v\nwant:\n%+v", got, events)
	}
	data, _ := os.ReadFile(d.EventsPath())
	line := strings.Split(string(data), "\n")[1]
	want := `{"time":"2026-11-30T03:45:13Z","type":"reload_applied","rollout":3,"version":2,"changes":[{"knob":"lr","old":0.000001,"new":0.000003},{"knob":"lr_schedule","old":"constant","new":"cosine"}]}`
	if line != want {
		t.Errorf("line:\n%s\nwant:\n%s", line, want)
	}
}

func TestLogEventFillsTime(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	d.LogEvent(Event{Type: EventRunStart, Version: 1})
	evs, err := ReadEvents(d.EventsPath())
	if err != nil || len(evs) != 1 || evs[0].Time.IsZero() {
		t.Errorf("events %v, %v", evs, err)
	}
}

func TestLogEventRejects(t *testing.T) {
	d := mustCreate(t, t.TempDir())
	tests := []struct {
		e   Event
		msg string
	}{
		{Event{Type: "reload_aplied"}, `unknown event type "reload_aplied"`},
		{Event{Type: EventRunStart, Rollout: -1}, "negative rollout"},
		{Event{Type: EventReloadApplied, Changes: []Change{{Knob: "lr"}}}, "recipe version 0"},
		{Event{Type: EventReloadApplied, Version: 2}, "no changes"},
		{Event{Type: EventReloadApplied, Version: 2, Changes: []Change{{Old: 1}}}, "names no knob"},
		{Event{Type: EventReloadRefused}, "no message"},
		{Event{Type: EventReloadInvalid}, "no message"},
		{Event{Type: EventCheckpointSaved}, "no checkpoint path"},
		{Event{Type: EventEval}, "no metrics"},
	}
	for _, tt := range tests {
		if err := d.LogEvent(tt.e); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("LogEvent(%+v): %v, want %q", tt.e, err, tt.msg)
		}
	}
	if data, _ := os.ReadFile(d.EventsPath()); len(data) != 0 {
		t.Errorf("rejected events were written: %s", data)
	}
}
