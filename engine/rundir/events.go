package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// EventType names what an event records.
type EventType string

// The event types of events.jsonl.
const (
	EventRunStart        EventType = "run_start"        // Version: the recipe version started with
	EventRunResume       EventType = "run_resume"       // Rollout: the checkpoint resumed from
	EventReloadApplied   EventType = "reload_applied"   // Version, Changes: knobs changed at this rollout boundary
	EventReloadRefused   EventType = "reload_refused"   // Message: the structural change that was refused
	EventReloadInvalid   EventType = "reload_invalid"   // Message: the validation error; the last good recipe goes on
	EventCheckpointSaved EventType = "checkpoint_saved" // Checkpoint: its path in the run directory
	EventEval            EventType = "eval"             // Metrics: the evaluation's results
	EventNaNDetected     EventType = "nan_detected"     // Message and/or Metrics: what went non-finite
	EventRunEnd          EventType = "run_end"          // Message: how it ended ("completed", an error)
	EventStepSkipped     EventType = "step_skipped"     // Message: why no optimizer step ran (e.g. every group filtered)
	EventWarning         EventType = "warning"          // Message: a condition worth reading that did not stop the run
	EventRolloutRetry    EventType = "rollout_retry"    // Message: why the generation failed; Metrics: attempt (1 = the first retry)
	// EventCheckpointRejected: Rollout, Message (why), Checkpoint (where it was moved aside).
	EventCheckpointRejected EventType = "checkpoint_rejected"
)

// eventTypes are the known types, in the order of the constants.
var eventTypes = []EventType{EventRunStart, EventRunResume, EventReloadApplied, EventReloadRefused,
	EventReloadInvalid, EventCheckpointSaved, EventEval, EventNaNDetected, EventRunEnd,
	EventStepSkipped, EventWarning, EventRolloutRetry, EventCheckpointRejected}

// Change is one knob a reload changed.
type Change struct {
	Knob string `json:"knob"`
	Old  any    `json:"old"`
	New  any    `json:"new"`
}

// Event is one line of events.jsonl. Fields other than Time, Type and
// Rollout are set by the types that use them (see the EventType
// constants) and omitted otherwise.
type Event struct {
	Time       time.Time          `json:"time"`
	Type       EventType          `json:"type"`
	Rollout    int                `json:"rollout"`
	Version    int                `json:"version,omitempty"`
	Changes    []Change           `json:"changes,omitempty"`
	Message    string             `json:"message,omitempty"`
	Checkpoint string             `json:"checkpoint,omitempty"`
	Metrics    map[string]float64 `json:"metrics,omitempty"`
}

// eventFields is Event without its JSON methods, so that eventJSON can embed it.
type eventFields Event

// eventJSON is Event's encoding: every field of Event as it is, except Metrics, which may hold
// NaN or ±Inf (the outer field shadows the embedded one). Embedding keeps a field added to Event
// from being silently dropped here.
type eventJSON struct {
	*eventFields
	Metrics map[string]jsonFloat `json:"metrics,omitempty"`
}

// MarshalJSON writes non-finite metrics as "NaN", "+Inf" or "-Inf".
func (e Event) MarshalJSON() ([]byte, error) {
	j := eventJSON{eventFields: (*eventFields)(&e)}
	if len(e.Metrics) > 0 {
		j.Metrics = make(map[string]jsonFloat, len(e.Metrics))
		for k, v := range e.Metrics {
			j.Metrics[k] = jsonFloat(v)
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Event) UnmarshalJSON(data []byte) error {
	*e = Event{}
	j := eventJSON{eventFields: (*eventFields)(e)}
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	e.Metrics = nil
	if j.Metrics != nil {
		e.Metrics = make(map[string]float64, len(j.Metrics))
		for k, v := range j.Metrics {
			e.Metrics[k] = float64(v)
		}
	}
	return nil
}

// check rejects events that would record less than their type promises.
func (e Event) check() error {
	if !slices.Contains(eventTypes, e.Type) {
		return fmt.Errorf("unknown event type %q", e.Type)
	}
	if e.Rollout < 0 {
		return fmt.Errorf("%s event: negative rollout %d", e.Type, e.Rollout)
	}
	switch e.Type {
	case EventReloadApplied:
		if e.Version < 1 {
			return fmt.Errorf("%s event: recipe version %d, want ≥ 1", e.Type, e.Version)
		}
		if len(e.Changes) == 0 {
			return fmt.Errorf("%s event: no changes", e.Type)
		}
		for _, c := range e.Changes {
			if c.Knob == "" {
				return fmt.Errorf("%s event: a change names no knob", e.Type)
			}
		}
	case EventReloadRefused, EventReloadInvalid, EventStepSkipped, EventWarning:
		if e.Message == "" {
			return fmt.Errorf("%s event: no message", e.Type)
		}
	case EventCheckpointSaved:
		if e.Checkpoint == "" {
			return fmt.Errorf("%s event: no checkpoint path", e.Type)
		}
	case EventCheckpointRejected:
		if e.Checkpoint == "" || e.Message == "" {
			return fmt.Errorf("%s event: no checkpoint path or no reason", e.Type)
		}
	case EventEval:
		if len(e.Metrics) == 0 {
			return fmt.Errorf("%s event: no metrics", e.Type)
		}
	}
	return nil
}

// LogEvent appends an event to events.jsonl; a zero Time is set to now
// (UTC).
func (d *Dir) LogEvent(e Event) error {
	if err := e.check(); err != nil {
		return fmt.Errorf("log event: %w", err)
	}
	if d.replica {
		return nil
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	return d.events.Append(e)
}

// ReadEvents reads an events file in file order.
func ReadEvents(path string) ([]Event, error) {
	var out []Event
	err := readLines(path, func(_ int, line []byte) error {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		if e.Type == "" {
			return errors.New("event has no type")
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}
