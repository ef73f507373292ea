// Package engine turns a validated recipe into a role graph and runs the
// outer loop: per rollout id, generate and score the data, train every
// trainable role on it, push weights to the samplers, checkpoint, and apply
// a pending hot reload. It sits between the role branch (specializations,
// estimators) and the backend branch (runtime).
//
// It holds:
//   - the graph-level checks of `stx vet` (graph.go, graph_workflow.go,
//     vet.go), which need the Go registries: registered specializations,
//     their key contracts, sync endpoints and cycles, teacher and reward
//     roles, workflow tasks;
//   - the roles and what they run on (roles.go; the flow-matching roles'
//     velocity models in roles_flow.go);
//   - rollout generation (rollout.go): datasets walked in seeded epochs and
//     a strategy per rollout, chosen from the trained role's contract
//     (its data kind and flags) and its estimator's needs, never from a
//     name, one file each: offline datasets (rollout_offline.go), on-policy
//     sampling scored with the task's rewards, with rejection and dynamic
//     sampling (rollout_onpolicy.go), whole batches or single rows sampled
//     by the teacher (rollout_teacherbatches.go, rollout_teacherrows.go),
//     candidate actions completed by the teacher (rollout_candidates.go),
//     velocity-model data (rollout_flow.go); multi-turn workflow episodes
//     against an external environment (rollout_workflow.go, through
//     engine/workflow); chat-template prompts (prompt.go);
//   - the train step, evaluation and the distillation probe (run_train.go,
//     eval.go, teacherkl.go), checkpoints and resume (run_record.go), hot
//     reload (run_reload.go) and the console line (console.go);
//   - built-in starting models (startmodel.go): model sources stx trains
//     itself by SFT on the recipe's task and caches;
//   - the objective a recipe family is judged by (objective.go).
package engine
