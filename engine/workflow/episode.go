package workflow

import (
	"fmt"
	"slices"
	"strings"
)

// Termination is why an episode ended.
type Termination string

// The termination reasons (the schema's #Termination).
const (
	TermDone      Termination = "done"
	TermMaxTurns  Termination = "max_turns"
	TermTruncated Termination = "truncated"
	TermTimeout   Termination = "timeout"
	TermError     Termination = "error"
)

// Terminations lists every reason, in metric order.
var Terminations = []Termination{TermDone, TermMaxTurns, TermTruncated, TermTimeout, TermError}

// ParseTermination checks a reason's name.
func ParseTermination(s string) (Termination, error) {
	for _, t := range Terminations {
		if string(t) == s {
			return t, nil
		}
	}
	names := make([]string, len(Terminations))
	for i, t := range Terminations {
		names[i] = string(t)
	}
	return "", fmt.Errorf("termination reason %q is not one of %s", s, strings.Join(names, ", "))
}

// Message is one turn of the conversation: the environment's observations
// are "user" turns and the policy's actions "assistant" turns.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Action is the policy's move for one conversation.
type Action struct {
	// Text is what the environment receives.
	Text string
	// PromptTokens is the rendered conversation the action was sampled
	// from; Tokens are the action's tokens (with the stop token when one
	// ended it) and LogProbs the sampler's log-probabilities of Tokens.
	PromptTokens, Tokens []int32
	LogProbs             []float32
	// Truncated is set, with nothing else, when the conversation no
	// longer fits the policy's prompt: the episode ends there.
	Truncated bool
}

// Policy acts for a batch of conversations at once (one call per turn of
// every running episode, so that a sampler batches them).
type Policy interface {
	Act(conversations [][]Message) ([]Action, error)
}

// Step is one action of an episode and the environment's answer.
type Step struct {
	// Observation is the observation the action answered.
	Observation string
	Action      Action
	Reward      float64
	Done        bool
	Info        map[string]any
}

// Episode is one task's trajectory.
type Episode struct {
	// Index is the episode's position in the batch Run was given.
	Index int
	Task  Task
	Steps []Step
	// Final is the observation after the last step.
	Final       string
	Termination Termination
	// Reason is the failure message of a timeout or error.
	Reason string
	// Attempts counts the runs of the episode (1 + retries).
	Attempts int
}

// Reward is the episode's total reward (the trajectory reward every step
// of it is trained with).
func (e *Episode) Reward() float64 {
	s := 0.0
	for _, st := range e.Steps {
		s += st.Reward
	}
	return s
}

// Correct reports whether the episode succeeded: its last step's boolean
// info.is_correct, else a total reward of at least threshold.
func (e *Episode) Correct(threshold float64) bool {
	if n := len(e.Steps); n > 0 {
		if c, ok := e.Steps[n-1].Info["is_correct"].(bool); ok {
			return c
		}
	}
	return e.Termination == TermDone && e.Reward() >= threshold
}

// Filtered reports whether compact filtering drops the episode.
func (e *Episode) Filtered(filter []Termination) bool {
	return slices.Contains(filter, e.Termination)
}

// Conversation is the episode's history up to (not including) step n's
// action: observations and actions alternating, starting with the first
// observation.
func (e *Episode) Conversation(n int) []Message {
	msgs := make([]Message, 0, 2*n+1)
	for i := 0; i < n; i++ {
		msgs = append(msgs, Message{"user", e.Steps[i].Observation}, Message{"assistant", e.Steps[i].Action.Text})
	}
	if n < len(e.Steps) {
		msgs = append(msgs, Message{"user", e.Steps[n].Observation})
	} else {
		msgs = append(msgs, Message{"user", e.Final})
	}
	return msgs
}

// Renderer turns a conversation into the policy's prompt text. Plain is the
// rendering for base models; a chat model's template is another Renderer.
type Renderer interface {
	Render(msgs []Message) (string, error)
}

// RendererFunc adapts a function to Renderer.
type RendererFunc func(msgs []Message) (string, error)

// Render calls f.
func (f RendererFunc) Render(msgs []Message) (string, error) { return f(msgs) }

// Plain renders a conversation as the text a base model continues: each
// observation as it is, each action followed by a newline. The first prompt
// is thus the first observation exactly, as a single-turn task's prompt.
var Plain Renderer = RendererFunc(func(msgs []Message) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
		if m.Role == "assistant" {
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
})
