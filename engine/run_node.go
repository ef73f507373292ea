package engine

import (
	"time"

	"stx.dev/stx/engine/rundir"
)

// GroupNode is this process's place in a group of processes (nodes) that train one run together
// (docs/multinode.md); the zero value is a run of one process.
type GroupNode struct {
	// Rank is this node's rank, 0 to Nodes-1; Nodes the group's size (0 or 1: one process).
	Rank, Nodes int
}

// WritesRunDir says whether this node writes the run directory: node 0 alone does
// (checkpoints, metrics, events, episodes, recipes, TensorBoard files), so that a group
// leaves one run directory whatever its size. The other nodes get a replica (rundir), which
// reads node 0's directory on resume and writes nothing.
func (n GroupNode) WritesRunDir() bool { return n.Nodes <= 1 || n.Rank == 0 }

// createRunDir and openRunDir are the one place where a node's run directory is chosen: the
// directory itself on node 0 (and in a run of one process), a replica on the others.
func createRunDir(n GroupNode, root, recipe string, now time.Time) (*rundir.Dir, error) {
	if n.WritesRunDir() {
		return rundir.Create(root, recipe, now)
	}
	return rundir.NewReplica(recipe)
}

// openRunDir opens the run directory to resume (see createRunDir).
func openRunDir(n GroupNode, path string) (*rundir.Dir, error) {
	if n.WritesRunDir() {
		return rundir.Open(path)
	}
	return rundir.OpenReplica(path)
}
