package runtime

import "github.com/gomlx/gomlx/pkg/ml/context"

// anyShapes lifts GoMLX's limit of 32 compiled graphs per executor (past it, Exec fails) on an
// executor whose input shapes follow the data: length buckets, packed row lengths and sequence
// counts multiply, and a long run must not stop at its 33rd shape. Each compiled graph holds
// code and shapes only (weights are variables), so keeping them all costs little; every one is
// still compiled once.
func anyShapes(e *context.Exec) *context.Exec {
	return e.SetMaxCache(-1)
}
