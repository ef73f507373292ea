package schema

import (
	"fmt"
	"strings"
)

// check is pass two: cross-field rules within one recipe that CUE cannot
// state well (or states with positions in the schema instead of the
// user's file). Checks that need the registries are the engine's.
func (c *Catalog) check(r *Recipe) List {
	var errs List
	at := func(path, format string, args ...any) {
		errs = append(errs, &Error{Pos: c.Pos(r.Name, path), Path: "recipes." + r.Name + "." + path, Msg: fmt.Sprintf(format, args...)})
	}
	seen := map[string]int{}
	for i, role := range r.Roles {
		if j, dup := seen[role.Name]; dup {
			at(fmt.Sprintf("roles[%d].name", i), "duplicate role name %q (also roles[%d])", role.Name, j)
			continue
		}
		seen[role.Name] = i
	}
	for i, s := range r.Syncs {
		if len(s.TargetKeys) != len(s.Keys) {
			at(fmt.Sprintf("syncs[%d].target_keys", i), "target_keys has %d names but keys has %d: they pair up one to one", len(s.TargetKeys), len(s.Keys))
		}
		dups := map[string]bool{}
		for _, k := range s.TargetKeys {
			if dups[k] {
				at(fmt.Sprintf("syncs[%d].target_keys", i), "key %q appears twice", k)
			}
			dups[k] = true
		}
	}
	k := r.Knobs
	total := k.RolloutBatchSize * k.NSamplesPerPrompt
	if k.TrainBatchSize > 0 && total%k.TrainBatchSize != 0 {
		at("knobs.train_batch_size", "train_batch_size %d does not divide the %d sequences of a rollout (rollout_batch_size %d × n_samples_per_prompt %d)",
			k.TrainBatchSize, total, k.RolloutBatchSize, k.NSamplesPerPrompt)
	}
	if tb := k.TrainBatch(); tb%k.MicroBatchSize != 0 && tb > k.MicroBatchSize {
		at("knobs.micro_batch_size", "micro_batch_size %d does not divide the train batch of %d sequences", k.MicroBatchSize, tb)
	}
	if k.Temperature == 0 && k.TopK > 0 {
		at("knobs.top_k", "top_k has no effect with temperature 0 (greedy)")
	}
	if k.EvalOnly && !k.EvalBeforeTrain && k.EvalEvery == 0 {
		at("knobs.eval_only", "eval_only with eval_before_train false and eval_every 0 would do nothing")
	}
	dataset := r.Task.Name == "jsonl" || r.Task.Name == "json" || r.Task.Name == "parquet"
	if dataset && r.Task.Path == "" {
		at("task.path", "task %q needs a path to a %s file", r.Task.Name, strings.ToUpper(r.Task.Name))
	}
	if !dataset && r.Task.Path != "" {
		at("task.path", "path is only read by the dataset tasks \"jsonl\", \"json\" and \"parquet\" (task is %q)", r.Task.Name)
	}
	if !dataset && r.Task.ValidationPath != "" {
		at("task.validation_path", "validation_path is only read by the dataset tasks (task is %q)", r.Task.Name)
	}
	errs = append(errs, c.checkWorkflow(r)...)
	return errs
}
