// Package loss holds the pure loss functions of stx's specializations: each builds
// its loss inside a GoMLX graph from *graph.Node inputs and returns the reduced loss
// node with named metric nodes.
//
// Every formula follows its paper or the reference implementation named in its
// doc comment, as docs/ALGORITHMS.md restates it (with the choice made where
// implementations disagree, its section K), and is checked against the test vectors
// in testdata/algorithms.json and against finite differences.
//
// Conventions used throughout:
//   - Token tensors are [rows, tokens] (B×T); masks hold 0/1 in any dtype (or bool)
//     and are converted to the dtype of the log-probs. Masked positions never leak
//     into a value or a gradient, even when they hold huge or garbage numbers.
//   - All computations keep the dtype of their float inputs; run them in float32 or
//     wider (log-prob differences lose too much in bf16 or f16).
//   - Token losses are reduced with a Reducer (loss_agg_mode) whose denominators can be
//     those of the whole optimizer-step mini-batch, so micro-batches add their
//     Σ w·ℓ and the summed gradients equal the gradient of the full batch.
//   - An empty batch is an all-zero mask (or a count of 0), never a zero-size
//     shape: SimpleGo v0.26's Where panics on [0]-sized operands.
//   - Functions that only touch host numbers (reward shaping, precomputed
//     advantages, schedules) are plain float64 Go functions.
//
// Only ops that SimpleGo supports and that have gradients in GoMLX v0.26 are used
// on differentiated paths: no Clamp/Clip (Clamp has no VJP; clamps are Min/Max,
// whose gradient goes to the constant bound where the clamp is active), and Expm1
// (no VJP) only through expm1, which attaches the gradient e^x by hand.
package loss
