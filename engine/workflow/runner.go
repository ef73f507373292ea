package workflow

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Config is a Runner's settings (the recipe's task.workflow).
type Config struct {
	// Command is the environment's argv; Argv0, when set, replaces its
	// argv[0] as the process sees it.
	Command []string
	Argv0   string
	// MaxTurns bounds the actions of an episode.
	MaxTurns int
	// Parallel is the number of environment processes (n_parallel_tasks).
	Parallel int
	// RetryLimit is how many times an episode that timed out or failed is
	// run again from reset.
	RetryLimit int
	// StepTimeout bounds the wait for every reply.
	StepTimeout time.Duration
}

// Check reports the first invalid setting.
func (c Config) Check() error {
	switch {
	case len(c.Command) == 0 || c.Command[0] == "":
		return errors.New("workflow: the environment command is empty")
	case c.MaxTurns < 1:
		return fmt.Errorf("workflow: max_turns %d < 1", c.MaxTurns)
	case c.Parallel < 1:
		return fmt.Errorf("workflow: n_parallel_tasks %d < 1", c.Parallel)
	case c.RetryLimit < 0:
		return fmt.Errorf("workflow: retry_limit %d < 0", c.RetryLimit)
	case c.StepTimeout <= 0:
		return fmt.Errorf("workflow: step_timeout %v is not positive", c.StepTimeout)
	}
	return nil
}

// Task is what an episode's reset sends: Fields as the "task" object and
// Seed as the "seed".
type Task struct {
	ID     string
	Seed   uint64
	Fields map[string]any
}

// Runner runs episodes on a pool of environment processes, reused across
// Run calls and restarted when they fail. It is rLLM's UnifiedWorkflowEngine
// with the environment out of process.
type Runner struct {
	cfg   Config
	slots []*Env // nil: not started (or to be restarted)
	// restarts counts processes started after the first of each slot
	// (slots restart concurrently).
	restarts atomic.Int64
	started  []bool
}

// NewRunner checks cfg; processes start on first use.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, slots: make([]*Env, cfg.Parallel), started: make([]bool, cfg.Parallel)}, nil
}

// Restarts is the number of processes started to replace a failed one.
func (r *Runner) Restarts() int { return int(r.restarts.Load()) }

// Close stops every process.
func (r *Runner) Close() {
	var wg sync.WaitGroup
	for i, e := range r.slots {
		if e != nil {
			wg.Add(1)
			go func() { defer wg.Done(); e.Close() }()
			r.slots[i] = nil
		}
	}
	wg.Wait()
}

// env returns slot i's process, starting (or restarting) it as needed.
func (r *Runner) env(i int) (*Env, error) {
	if e := r.slots[i]; e != nil && !e.Dead() {
		return e, nil
	}
	if r.slots[i] != nil {
		r.slots[i].Close()
		r.slots[i] = nil
	}
	e, err := StartEnv(r.cfg.Command, r.cfg.Argv0, r.cfg.StepTimeout)
	if err != nil {
		return nil, err
	}
	if r.started[i] {
		r.restarts.Add(1)
	}
	r.started[i] = true
	r.slots[i] = e
	return e, nil
}

// running is an episode in a slot.
type running struct {
	ep    *Episode
	reset bool // the environment has started this attempt
}

// Run plays one episode per task and returns them in task order. Episodes
// run Parallel at a time; every turn the policy acts for all running ones
// in one call. Environment failures end episodes (after retries) with their
// reason; only a policy error or a process that cannot be started at all
// fails Run.
func (r *Runner) Run(tasks []Task, policy Policy) ([]*Episode, error) {
	eps := make([]*Episode, len(tasks))
	next := 0
	slot := make([]*running, r.cfg.Parallel)
	for {
		// Fill idle slots and reset their episodes (in parallel), until each
		// slot has an episode ready to act or no task is left.
		for {
			var fresh []int
			for i := range slot {
				if slot[i] == nil && next < len(tasks) {
					eps[next] = &Episode{Index: next, Task: tasks[next], Attempts: 1}
					slot[i] = &running{ep: eps[next]}
					next++
				}
				if slot[i] != nil && !slot[i].reset {
					fresh = append(fresh, i)
				}
			}
			if len(fresh) == 0 {
				break
			}
			fails := make([]*Failure, len(slot))
			obs := make([]string, len(slot))
			startErrs := make([]error, len(slot))
			r.each(fresh, func(i int) {
				e, err := r.env(i)
				if err != nil {
					startErrs[i] = err
					return
				}
				o, err := e.Reset(slot[i].ep.Task.Fields, slot[i].ep.Task.Seed)
				if err != nil {
					fails[i] = asFailure(err)
					return
				}
				obs[i] = o
			})
			for _, err := range startErrs {
				if err != nil {
					// A process that cannot be started at all is a wrong
					// command, not a failed episode.
					return nil, err
				}
			}
			for _, i := range fresh {
				if fails[i] != nil {
					r.failed(slot, i, fails[i])
					continue
				}
				slot[i].ep.Final, slot[i].reset = obs[i], true
			}
		}
		var act []int
		for i, s := range slot {
			if s != nil {
				act = append(act, i)
			}
		}
		if len(act) == 0 {
			return eps, nil
		}
		convs := make([][]Message, len(act))
		for j, i := range act {
			ep := slot[i].ep
			convs[j] = ep.Conversation(len(ep.Steps))
		}
		actions, err := policy.Act(convs)
		if err != nil {
			return nil, err
		}
		if len(actions) != len(act) {
			return nil, fmt.Errorf("workflow: policy returned %d actions for %d conversations", len(actions), len(act))
		}
		var send []int
		for j, i := range act {
			if actions[j].Truncated {
				r.finish(slot, i, TermTruncated, "")
				continue
			}
			send = append(send, i)
		}
		results := make([]StepResult, len(slot))
		fails := make([]*Failure, len(slot))
		actOf := map[int]Action{}
		for j, i := range act {
			actOf[i] = actions[j]
		}
		r.each(send, func(i int) {
			// The slot's process is the one reset for this episode (a failed
			// one reports itself dead rather than being replaced mid-episode).
			var err error
			results[i], err = r.slots[i].Step(actOf[i].Text)
			if err != nil {
				fails[i] = asFailure(err)
			}
		})
		for _, i := range send {
			if fails[i] != nil {
				r.failed(slot, i, fails[i])
				continue
			}
			ep, res := slot[i].ep, results[i]
			ep.Steps = append(ep.Steps, Step{Observation: ep.Final, Action: actOf[i], Reward: res.Reward, Done: res.Done, Info: res.Info})
			ep.Final = res.Observation
			switch {
			case res.Done:
				r.finish(slot, i, TermDone, "")
			case len(ep.Steps) >= r.cfg.MaxTurns:
				r.finish(slot, i, TermMaxTurns, "")
			}
		}
	}
}

// each runs f for every slot index in idx concurrently (each slot's
// process is touched by one goroutine only).
func (r *Runner) each(idx []int, f func(i int)) {
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}

// failed retries slot i's episode from reset, or ends it with the failure.
func (r *Runner) failed(slot []*running, i int, f *Failure) {
	s := slot[i]
	if s.ep.Attempts <= r.cfg.RetryLimit {
		s.ep.Attempts++
		s.ep.Steps, s.ep.Final, s.reset = nil, "", false
		return
	}
	r.finish(slot, i, f.Reason, f.Msg)
}

// finish ends slot i's episode and frees the slot.
func (r *Runner) finish(slot []*running, i int, t Termination, reason string) {
	slot[i].ep.Termination, slot[i].ep.Reason = t, reason
	slot[i] = nil
}

func asFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Reason: TermError, Msg: err.Error(), Restart: true}
}
