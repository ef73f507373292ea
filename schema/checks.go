package schema

import (
	"fmt"
	"strings"

	"stx.dev/stx/hub"
)

// check is pass two: cross-field rules within one recipe that CUE cannot
// state well (or states with positions in the schema instead of the
// user's file). Checks that need the registries are the engine's.
func (c *Catalog) check(r *Recipe) List {
	var errs List
	at := func(path, format string, args ...any) {
		errs = append(errs, c.Err(r.Name, path, format, args...))
	}
	if len(r.Roles) == 0 {
		at("roles", "must not be empty")
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
	errs = append(errs, c.checkSizes(r)...)
	errs = append(errs, c.checkTerms(r)...)
	if k.Temperature == 0 && k.TopK > 0 {
		at("knobs.top_k", "top_k has no effect with temperature 0 (greedy)")
	}
	if k.EvalOnly && !k.EvalBeforeTrain && k.EvalEvery == 0 {
		at("knobs.eval_only", "eval_only with eval_before_train false and eval_every 0 would do nothing")
	}
	dataset := r.Task.Name == "jsonl" || r.Task.Name == "json" || r.Task.Name == "parquet"
	if dataset && r.Task.Path == "" && r.Task.Dataset == "" {
		at("task.path", "task %q needs a path to a %s file", r.Task.Name, strings.ToUpper(r.Task.Name))
	}
	if !dataset && r.Task.Path != "" {
		at("task.path", "path is only read by the dataset tasks \"jsonl\", \"json\" and \"parquet\" (task is %q)", r.Task.Name)
	}
	if !dataset && r.Task.ValidationPath != "" {
		at("task.validation_path", "validation_path is only read by the dataset tasks (task is %q)", r.Task.Name)
	}
	errs = append(errs, c.checkWorkflow(r)...)
	errs = append(errs, c.checkHub(r)...)
	return errs
}

// checkHub checks the fields that name Hugging Face Hub models and datasets:
// a Hub dataset is read from its Parquet files instead of a path, its
// config/split/revision fields and model.revision go only with a Hub id, and
// hf:// paths parse.
func (c *Catalog) checkHub(r *Recipe) List {
	var errs List
	at := func(path, format string, args ...any) {
		errs = append(errs, c.Err(r.Name, path, format, args...))
	}
	t := r.Task
	if t.Dataset != "" {
		if err := hub.CheckRepoID(t.Dataset); err != nil {
			at("task.dataset", "%v", err)
		}
		if t.Name != "parquet" {
			at("task.dataset", "a Hub dataset is read from its Parquet files: task name must be \"parquet\" (is %q)", t.Name)
		}
		if t.Path != "" {
			at("task.path", "give either path or dataset, not both")
		}
		if t.ValidationPath != "" {
			at("task.validation_path", "a Hub dataset holds out a split of its own (validation_split_name) or a fraction of the train split (validation_split), not a file")
		}
		split := t.Split
		if split == "" {
			split = "train"
		}
		if t.ValidationSplitName == split {
			at("task.validation_split_name", "validation_split_name %q is the split trained on", split)
		}
	} else {
		for _, f := range []struct{ name, value string }{
			{"config", t.Config}, {"split", t.Split}, {"validation_split_name", t.ValidationSplitName}, {"revision", t.Revision},
		} {
			if f.value != "" {
				at("task."+f.name, "%s applies to a Hub dataset: set task.dataset (\"namespace/name\")", f.name)
			}
		}
	}
	for _, f := range []struct{ name, value string }{{"path", t.Path}, {"validation_path", t.ValidationPath}} {
		if hub.IsPath(f.value) {
			if _, err := hub.ParsePath(f.value); err != nil {
				at("task."+f.name, "%v", err)
			}
		}
	}
	for i, role := range r.Roles {
		m := role.Model
		if strings.HasPrefix(m.Source, "hf://") {
			at(fmt.Sprintf("roles[%d].model.source", i), "a Hub model is named by its id alone: %q", strings.TrimPrefix(strings.TrimPrefix(m.Source, "hf://"), "models/"))
		}
		switch {
		case m.Revision == "":
		case m.InitFrom != "":
			at(fmt.Sprintf("roles[%d].model.revision", i), "revision goes with model.source; init_from copies the initial weights of role %q: set the revision there", m.InitFrom)
		case !hub.IsRepoID(m.Source):
			at(fmt.Sprintf("roles[%d].model.revision", i), "revision applies to a Hugging Face Hub model id (\"namespace/name\"), and model.source %q is not one", m.Source)
		}
	}
	return errs
}

// Bounds of products of knobs that each pass the schema's range, far above
// what a real run uses: past them a run would only fail later, out of
// memory. Bounds that involve token lengths are the engine's (flow recipes
// have no tokens).
const (
	maxRolloutRows    = 1 << 20 // sequences of one rollout
	maxValidationRows = 1 << 24 // validation prompts × samples per prompt
)

// checkSizes bounds the products of size knobs.
func (c *Catalog) checkSizes(r *Recipe) List {
	var errs List
	k := r.Knobs
	if rows := int64(k.RolloutBatchSize) * int64(k.NSamplesPerPrompt); rows > maxRolloutRows {
		path := c.FactorPath(r.Name, "knobs.rollout_batch_size", "knobs.n_samples_per_prompt")
		errs = append(errs, &Error{Pos: c.Pos(r.Name, path), Path: "recipes." + r.Name + "." + path,
			Msg: fmt.Sprintf("a rollout of rollout_batch_size %d × n_samples_per_prompt %d = %d sequences exceeds the limit of %d",
				k.RolloutBatchSize, k.NSamplesPerPrompt, rows, maxRolloutRows)})
	}
	if n := int64(r.Task.ValidationSize) * int64(k.NValSamplesPerPrompt); n > maxValidationRows {
		path := c.FactorPath(r.Name, "task.validation_size", "knobs.n_val_samples_per_prompt")
		errs = append(errs, &Error{Pos: c.Pos(r.Name, path), Path: "recipes." + r.Name + "." + path,
			Msg: fmt.Sprintf("validation of validation_size %d × n_val_samples_per_prompt %d = %d sequences exceeds the limit of %d",
				r.Task.ValidationSize, k.NValSamplesPerPrompt, n, maxValidationRows)})
	}
	return errs
}

// FactorPath picks which of the factors of a product that is too large to
// blame (paths relative to the recipe): one set by an override, else the
// last one the recipe's files set, else the last.
func (c *Catalog) FactorPath(recipe string, paths ...string) string {
	if at := c.origin(); at != nil {
		return at.FactorPath(recipe, paths...)
	}
	for _, p := range paths {
		for _, o := range c.overrides[recipe] {
			if pathHasPrefix(p, o.pathString()) {
				return p
			}
		}
	}
	for i := len(paths) - 1; i >= 0; i-- {
		if _, ok := c.userPathPos("recipes." + recipe + "." + paths[i]); ok {
			return paths[i]
		}
	}
	return paths[len(paths)-1]
}
