// Package kernels holds the data-movement and reduction kernels of stx's own CPU backend:
// transpose, broadcast, slice, concatenate, gather, scatter, reduce, arg-min/max, iota, pad and
// reverse over flat row-major slices.
//
// The kernels know nothing of GoMLX: the graph executor in runtime/cpu validates shapes (with
// GoMLX's shape inference) and calls them with plain slices and dimensions. A kernel panics on
// inconsistent lengths, since that is a bug in its caller, never a user error.
//
// Every kernel is deterministic: large inputs are split across runtime.GOMAXPROCS(0) goroutines,
// but only over output elements, so the order in which any output value is accumulated never
// depends on the number of workers.
package kernels
