package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"stx.dev/stx/internal/lineproc"
)

// maxLine bounds one reply line: a longer one is malformed, so a runaway
// environment cannot make stx buffer without limit.
const maxLine = 1 << 20

// closeGrace is how long Close waits for a process to exit after its stdin
// is closed before it kills it.
const closeGrace = 3 * time.Second

// Failure is why an environment request failed; Reason is TermTimeout or
// TermError. Restart is true when the process cannot serve another request
// (it timed out, answered malformed, or exited).
type Failure struct {
	Reason  Termination
	Msg     string
	Restart bool
}

func (f *Failure) Error() string { return f.Msg }

// Env is one environment process speaking the package's JSON-lines protocol.
type Env struct {
	proc    *lineproc.Proc
	timeout time.Duration
	dead    bool // failed: must not serve another request
}

// StartEnv starts command (argv) with the given per-request timeout.
// argv0, when not empty, replaces the program's argv[0] (stx runs itself as
// "stx" so that the binary recognises its own subcommand).
func StartEnv(command []string, argv0 string, timeout time.Duration) (*Env, error) {
	if len(command) == 0 || command[0] == "" {
		return nil, errors.New("environment command is empty")
	}
	p, err := lineproc.Start(command, argv0, maxLine)
	if err != nil {
		return nil, fmt.Errorf("start environment %w", err)
	}
	return &Env{proc: p, timeout: timeout}, nil
}

// reply is the union of the reset and step replies.
type reply struct {
	Observation *string        `json:"observation"`
	Reward      *float64       `json:"reward"`
	Done        *bool          `json:"done"`
	Info        map[string]any `json:"info"`
	Error       *string        `json:"error"`
}

// Reset starts an episode of task with seed and returns the first observation.
func (e *Env) Reset(task map[string]any, seed uint64) (string, error) {
	r, err := e.call(map[string]any{"op": "reset", "task": task, "seed": seed})
	if err != nil {
		return "", err
	}
	if r.Observation == nil {
		return "", e.malformed(`reset reply has no "observation" string`)
	}
	return *r.Observation, nil
}

// StepResult is the environment's answer to one action.
type StepResult struct {
	Observation string
	Reward      float64
	Done        bool
	Info        map[string]any
}

// Step sends action and returns the environment's reply.
func (e *Env) Step(action string) (StepResult, error) {
	r, err := e.call(map[string]any{"op": "step", "action": action})
	if err != nil {
		return StepResult{}, err
	}
	var s StepResult
	if r.Done != nil {
		s.Done = *r.Done
	}
	if r.Observation == nil && !s.Done {
		return StepResult{}, e.malformed(`step reply has no "observation" string and is not done`)
	}
	if r.Observation != nil {
		s.Observation = *r.Observation
	}
	if r.Reward != nil {
		s.Reward = *r.Reward
	}
	s.Info = r.Info
	return s, nil
}

// call sends one request and waits at most the timeout for its reply line.
func (e *Env) call(req map[string]any) (*reply, error) {
	if e.dead {
		return nil, &Failure{Reason: TermError, Msg: "environment process is not running", Restart: true}
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, &Failure{Reason: TermError, Msg: fmt.Sprintf("encode request: %v", err)}
	}
	data = append(data, '\n')
	select {
	case l, ok := <-e.proc.Lines():
		// Output nobody asked for would be taken as the next reply.
		if !ok {
			return nil, e.crashed()
		}
		if l.Err != nil {
			return nil, e.malformed(l.Err.Error())
		}
		return nil, e.malformed(fmt.Sprintf("unrequested output %q", lineproc.Clip(l.Data, 200)))
	default:
	}
	werr := make(chan error, 1)
	go func() {
		_, err := e.proc.Write(data)
		werr <- err
	}()
	timer := time.NewTimer(e.timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-e.proc.Lines():
			if !ok {
				return nil, e.crashed()
			}
			if l.Err != nil {
				return nil, e.malformed(l.Err.Error())
			}
			var r reply
			dec := json.NewDecoder(bytes.NewReader(l.Data))
			if err := dec.Decode(&r); err != nil {
				return nil, e.malformed(fmt.Sprintf("reply %q is not a JSON object: %v", lineproc.Clip(l.Data, 200), err))
			}
			if dec.More() {
				return nil, e.malformed(fmt.Sprintf("reply %q holds more than one JSON value", lineproc.Clip(l.Data, 200)))
			}
			if r.Error != nil {
				return nil, &Failure{Reason: TermError, Msg: "environment error: " + *r.Error}
			}
			return &r, nil
		case err := <-werr:
			if err != nil {
				// The process closed its stdin or exited: its output tells which.
				werr = nil
				select {
				case <-e.proc.Exited():
					return nil, e.crashed()
				case <-timer.C:
					e.kill()
					return nil, &Failure{Reason: TermError, Msg: fmt.Sprintf("write to environment: %v", err), Restart: true}
				}
			}
			werr = nil
		case <-timer.C:
			e.kill()
			return nil, &Failure{Reason: TermTimeout, Msg: fmt.Sprintf("no reply from the environment within %v", e.timeout), Restart: true}
		}
	}
}

// malformed kills the process (its stream can no longer be trusted).
func (e *Env) malformed(msg string) error {
	e.kill()
	return &Failure{Reason: TermError, Msg: "malformed reply from the environment: " + msg, Restart: true}
}

// crashed reports an exited process with its status and the end of its stderr.
func (e *Env) crashed() error {
	e.dead = true
	msg := "environment process exited"
	select {
	case <-e.proc.Exited():
		if err := e.proc.WaitErr(); err != nil {
			msg += " (" + err.Error() + ")"
		}
	case <-time.After(closeGrace):
		// The output closed but the process lives on: it is of no further use.
		e.kill()
		msg = "environment process closed its output"
	}
	if s := strings.TrimSpace(e.proc.Stderr()); s != "" {
		msg += "; stderr: " + s
	}
	return &Failure{Reason: TermError, Msg: msg, Restart: true}
}

// kill ends the process and waits (boundedly) for it.
func (e *Env) kill() {
	e.dead = true
	e.proc.Kill()
	select {
	case <-e.proc.Exited():
	case <-time.After(closeGrace):
	}
}

// Dead reports whether the process must be replaced before the next episode.
func (e *Env) Dead() bool { return e.dead }

// Close closes the process's stdin, gives it closeGrace to exit and kills
// it otherwise.
func (e *Env) Close() {
	e.proc.Close(closeGrace)
	e.dead = true
}
