package schema

import (
	"fmt"
	"time"
)

// Workflow is a recipe's task.workflow: multi-turn episodes against an
// environment process.
type Workflow struct {
	Command        []string       `json:"command"`
	MaxTurns       int            `json:"max_turns"`
	NParallelTasks int            `json:"n_parallel_tasks"`
	RetryLimit     int            `json:"retry_limit"`
	StepTimeout    string         `json:"step_timeout"`
	Filter         WorkflowFilter `json:"filter"`
}

// WorkflowFilter is compact filtering: true drops the episodes that ended so.
type WorkflowFilter struct {
	Error     bool `json:"error"`
	Timeout   bool `json:"timeout"`
	Truncated bool `json:"truncated"`
	MaxTurns  bool `json:"max_turns"`
}

// Reasons are the termination reasons filtered, in a fixed order.
func (f WorkflowFilter) Reasons() []string {
	var out []string
	for _, r := range []struct {
		on   bool
		name string
	}{{f.Error, "error"}, {f.Timeout, "timeout"}, {f.Truncated, "truncated"}, {f.MaxTurns, "max_turns"}} {
		if r.on {
			out = append(out, r.name)
		}
	}
	return out
}

// maxStepTimeout bounds step_timeout: a longer wait is a hang in practice.
const maxStepTimeout = time.Hour

// Timeout is StepTimeout parsed (checked by vet).
func (w *Workflow) Timeout() (time.Duration, error) {
	d, err := time.ParseDuration(w.StepTimeout)
	if err != nil {
		return 0, fmt.Errorf("step_timeout %q: %w", w.StepTimeout, err)
	}
	if d <= 0 || d > maxStepTimeout {
		return 0, fmt.Errorf("step_timeout %s is outside (0, %s]", w.StepTimeout, maxStepTimeout)
	}
	return d, nil
}

// checkWorkflow is pass two for task.workflow.
func (c *Catalog) checkWorkflow(r *Recipe) List {
	w := r.Task.Workflow
	if w == nil {
		return nil
	}
	var errs List
	at := func(path, format string, args ...any) {
		errs = append(errs, c.Err(r.Name, path, format, args...))
	}
	if _, err := w.Timeout(); err != nil {
		at("task.workflow.step_timeout", "%v", err)
	}
	if len(r.Task.Reward) > 0 {
		at("task.reward", "a workflow's rewards come from its environment: task.reward is not used with task.workflow")
	}
	if r.Task.RewardRole != "" {
		at("task.reward_role", "a workflow's rewards come from its environment: task.reward_role is not used with task.workflow")
	}
	return errs
}
