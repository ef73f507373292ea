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
//   - the roles and what they run on (roles.go): a language model or the
//     flow roles' velocity model, trained and checkpointed the same way;
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
//     engine/workflow); the flow roles' ODE and SDE samplers
//     (flow_sampler.go); chat-template prompts (prompt.go);
//   - the outer loop (run.go) and its collaborators: the trainer's train
//     step (run_train.go), the checkpointer's checkpoints and resume
//     (run_checkpoint.go), hot reload (run_reload.go); evaluation and the
//     distillation probe (eval.go, teacherkl.go), the episode log
//     (run_record.go) and the console line (console.go);
//   - built-in starting models (startmodel.go): model sources stx trains
//     itself by SFT on the recipe's task and caches;
//   - the objective a recipe family is judged by (objective.go).
package engine
