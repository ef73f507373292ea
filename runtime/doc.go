// Package runtime is stx's backend branch: it knows tensors and models and nothing of
// algorithms. It provides
//
//   - backend selection (NewBackend): stx's own "cpu" backend (runtime/cpu, OpenBLAS) by
//     default, else SimpleGo ("go", pure Go); XLA through a PJRT plugin when configured
//     ("xla:cuda", a plugin path, $GOMLX_BACKEND), never a download;
//   - one decoder family for Llama 2/3.x (rope_scaling linear and llama3), Mistral (sliding
//     window), Qwen2/2.5 and Qwen3 dense checkpoints (Model, Config, BuiltinConfig "tiny" and
//     "bench"), with graph-level building blocks for the specializations: Forward, Logits,
//     LogProbs, Entropy, ValueHead, MaskedMean and friends; configs that name another
//     architecture are refused with a clear error;
//   - the flow roles' velocity MLP (VelocityModel, BuiltinVelocityConfig "flow_mlp");
//     both kinds of model implement Weights, the parameter interface that the trainer, the
//     evaluator and the checkpoint format work on;
//   - memory at real scale: per-row functions of the LM head's logits (log-probs, entropies,
//     divergences to a teacher) over chunks of rows with a gradient that recomputes each
//     chunk (ChunkedHead, Model.Head, TokenLogProbs), so that a training graph never holds the
//     [batch·seq, vocab] logits; activation checkpointing of the decoder layers
//     (Model.ActivationCheckpointing, Checkpoint);
//   - Hugging Face layout IO (LoadModel, OpenModel, Model.SaveHF) on top of
//     runtime/safetensors: f32, bf16, f16 and f64 weights, saved back in their dtype; configs
//     and safetensors headers checked against size limits before anything is allocated; a
//     model directory's side files (tokenizer.json, chat template) copied with saved weights
//     (ReadModelFile);
//   - training (Trainer): gradients of a loss built in the graph by a LossOf, accumulation over
//     micro-batches, global-norm clipping, AdamW with PyTorch semantics, LR schedules, atomic
//     checkpoints that resume bit-exactly;
//   - forward-only scoring (Scorer, Evaluator, ScoreJSONL, with a chat template
//     of runtime/chat) and generation with a host-side KV cache (Sampler), decoded in plain Go
//     on the CPU backends;
//   - the measurements behind `stx bench` (Bench).
//
// Graphs are compiled per input shape; callers pad sequence lengths and batch sizes to the
// buckets of BucketLength and BucketBatch so that a run compiles a handful of graphs.
//
// Importing this package replaces GoMLX v0.26.0's Dot/DotGeneral gradients, which materialise
// an O(M·N·K) tensor per matmul, with two-DotGeneral ones (see matmul.go).
package runtime
