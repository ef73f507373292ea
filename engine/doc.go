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
//   - rollout generation (rollout.go): datasets walked in seeded epochs,
//     sampling and scoring with the task's rewards, rejection and dynamic
//     sampling, and the distillation rollouts (teacher mixing, GKD's
//     on-policy draw, AggreVaTe's states); multi-turn workflow episodes
//     against an external environment (rollout_workflow.go, through
//     engine/workflow); the flow roles' ODE and SDE samplers
//     (rollout_flow.go); chat-template prompts (prompt.go);
//   - the outer loop (run.go) and its collaborators: the trainer's train
//     step (run_train.go), the checkpointer's checkpoints and resume
//     (run_checkpoint.go), hot reload (run_reload.go); evaluation and the
//     distillation probe (eval.go, teacherkl.go), the episode log
//     (run_record.go) and the console line (console.go);
//   - built-in starting models (startmodel.go): model sources stx trains
//     itself by SFT on the recipe's task and caches;
//   - the objective a recipe family is judged by (objective.go).
package engine
