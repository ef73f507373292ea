// Package cpu is stx's own GoMLX backend for CPUs, registered as "cpu".
//
// GoMLX's pure-Go backend (SimpleGo) multiplies float32 matrices at a few GFLOP/s and cannot be
// extended from outside its package, so stx brings a backend of its own: matrix products go to
// OpenBLAS (package blas; DotGeneral is normalised to batch × [M,K]·[K,N], using Sgemm's
// transpose flags instead of copies where the layout allows), data movement and reductions to
// package kernels, and elementwise arithmetic to loops split across cores when large. The hot
// float32 ones (exp, logistic, log, sqrt, the four arithmetic ops, max, min, …) on slices of 256
// elements or more, and max and min reductions over the last axes, run in C (vec.c), compiled
// for baseline x86-64, AVX2 and AVX-512 and picked at start, with the same bits as the Go loops
// they replace (which remain for short slices and for builds without cgo or with -tags
// noopenblas); exp and the logistic function use a float32 polynomial, not math.Exp.
//
// Graphs are compiled into a flat program in topological order, rewritten twice on the way
// (same bits, fewer passes over memory): a binary op reading a BroadcastInDim reads the
// broadcast's operand instead, with a row or column pattern, and the broadcast is not
// computed unless something else needs it (fuse.go); runs of float32 elementwise ops whose
// results only the next op reads become one step that computes them block by block in cache
// (chain.go). Broadcasting binary ops run in C over whole chunks of rows (vec.c's
// stx_vec_binary_nest). A liveness analysis then decides,
// for every intermediate buffer, the node after which it is dead: dead buffers go back to a
// pool shared by all executions, and elementwise ops write in place into an input that dies
// at them. Large intermediates live outside the Go heap, in memory mappings the pool reuses by
// size and unmaps itself, keeping what it maps within the most ever in use at once; what the
// caller receives (outputs, uploads) are Go slices (hostmem.go). So a train step's resident
// memory is its live set, not the twice-the-live-heap the garbage collector would let grow.
// Each execution has its own buffers, so one Executable may run concurrently from several
// goroutines.
//
// Ops the backend leaves out fail at graph-building time with "not implemented by the cpu
// backend: <OpName>".
package cpu
