// Package workflow runs multi-turn episodes of a policy against an
// environment that lives in an external process, the way rLLM's Workflow and
// UnifiedWorkflowEngine do: each episode is a trajectory of steps (the
// rendered conversation so far as the prompt, the policy's action as the
// response, the environment's reward), and the engine turns the valid ones
// into training rows that share one trajectory.
//
// # Protocol
//
// The environment is a command (task.workflow.command) that reads one JSON
// object per line on stdin and answers each with one JSON object per line on
// stdout. Its stderr is kept (the last few KiB) for error messages only.
//
//	→ {"op":"reset","task":{"id":"…","prompt":"…","answer":"…","data_source":"…"},"seed":N}
//	← {"observation":"…"}
//	→ {"op":"step","action":"<the model's completion>"}
//	← {"observation":"…","reward":x,"done":true|false,"info":{…}}
//
// reset starts a new episode (a process serves many episodes one after
// another); seed is the episode's seed, so that a deterministic environment
// replays the same episode. In a step reply reward defaults to 0 and done to
// false; observation may be left out when done is true. info is free-form;
// a boolean info.is_correct on the last step says whether the episode
// succeeded (otherwise its total reward ≥ correct_threshold does). Either
// reply may instead be {"error":"…"}: the episode fails with that message
// and the process is kept. When stx is done it closes the process's stdin;
// the process should then exit (it is killed a few seconds later).
//
// # Failures
//
// Every request waits at most step_timeout for its reply. An episode ends
// with one of these termination reasons:
//
//	done       the environment said done
//	max_turns  max_turns actions were taken without done
//	truncated  the rendered conversation no longer fits max_prompt_tokens
//	timeout    no reply within step_timeout (the process is killed)
//	error      an {"error"} reply, a malformed reply (not one JSON object per
//	           line, a missing or mistyped field, a line over 1 MiB), or a
//	           process that exited or could not start
//
// A process that timed out, answered malformed or exited is restarted for
// the next episode of its slot. An episode that ended in timeout or error is
// run again from reset up to retry_limit times; if it still fails it is kept
// with its reason. Episodes whose reason is in task.workflow.filter are left
// out of training (rLLM's compact filtering) but still logged and counted.
//
// # Parallelism and determinism
//
// n_parallel_tasks processes run episodes side by side; the policy acts for
// all of them in one batched call per turn. Which episode runs in which slot
// and every seed depend only on the run's seed, so a deterministic
// environment gives the same episodes on every run (timeouts aside).
//
// # Built-in environment
//
// ServeCalculator is an example environment that speaks this protocol (`stx
// env calculator`): a calculator tool for arithmetic word problems.
package workflow
