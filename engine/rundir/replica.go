package rundir

import (
	"errors"
	"fmt"
)

// ErrReplica is what a replica answers when asked to start a checkpoint: the engine must not
// save on a node that does not write the run directory, so reaching it is a bug, said loudly.
var ErrReplica = errors.New("this node does not write the run directory (node 0 of the group does)")

// A replica is the run directory as the other nodes of a group of processes see it, every
// node but node 0 (docs/multinode.md): node 0 alone writes a run's directory, so that N
// processes training one run leave one directory, not N racing over the same files. A
// replica reads (run.json, the recorded recipes, the checkpoints: every node of a resumed
// group loads node 0's last checkpoint) and writes nothing: appending metrics, events and
// episodes, recording a recipe, keeping initial weights, truncating the streams and
// cleaning, pruning or rejecting checkpoints succeed without touching the disk (node 0 does
// each of them), and BeginCheckpoint fails with ErrReplica. It takes no lock: node 0 holds
// the directory's.

// NewReplica is a replica of a new run, which node 0 creates: it has no path (node 0 names
// the directory after its own clock) and nothing to read.
func NewReplica(recipe string) (*Dir, error) {
	if err := checkRecipeName(recipe); err != nil {
		return nil, err
	}
	return &Dir{meta: meta{Format: runFormat, Version: runVersion, Recipe: recipe}, replica: true,
		pending: map[string]bool{}}, nil
}

// OpenReplica opens node 0's existing run directory on another node, to resume it: it checks
// that path is a run directory (run.json) and reads it, repairing nothing.
func OpenReplica(path string) (*Dir, error) {
	m, err := readMeta(path)
	if err != nil {
		return nil, fmt.Errorf("open run as a replica: %w", err)
	}
	return &Dir{path: path, meta: m, replica: true, pending: map[string]bool{}}, nil
}

// Writes says whether this Dir writes its directory: false for a replica.
func (d *Dir) Writes() bool { return !d.replica }
