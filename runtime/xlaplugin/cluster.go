package xlaplugin

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Cluster is this process's place in a group of processes (nodes) whose PJRT clients form
// one client over every node's devices.
type Cluster struct {
	// Node is this process's rank, Nodes the group's size.
	Node, Nodes int
	// KV is the group's key-value store (served by node 0).
	KV KeyValueStore
}

// KeyValueStore is the store a plugin's clients exchange their topology and collectives' ids
// through. Get waits up to timeout for a key (an error whose Timeout() is true, or
// context.DeadlineExceeded, when it passes); TryGet answers at once.
type KeyValueStore interface {
	Get(key string, timeout time.Duration) ([]byte, error)
	TryGet(key string) ([]byte, bool, error)
	Put(key string, value []byte) error
}

// keyPrefix keeps the plugins' keys apart from stx's own in the group's store.
const keyPrefix = "pjrt/"

func clusterKey(k string) string { return keyPrefix + k }

// Topology is what a PJRT client reports of its place: its process index, the devices of
// every process and those of this one.
type Topology struct {
	ProcessIndex, Devices, Addressable int
}

// isCPUPlugin says whether a plugin file is XLA's CPU plugin, by its name.
func isCPUPlugin(path string) bool {
	return strings.Contains(strings.ToLower(filepath.Base(path)), "cpu")
}

// SingleProcessError refuses a group of nodes on XLA's CPU plugin. What the plugins do, tried
// (runtime/xlaplugin's TestCPUPluginStaysInOneProcess): the CPU plugin's PJRT_Client_Create
// reads no node_id or num_nodes (PJRT 0.115 refuses them, "Unexpected option name passed to
// PJRT_Client_Create: node_id"; 0.81 and 0.106 ignore them), never calls
// the key-value callbacks, and builds its collectives in-process: its CpuClientOptions'
// cross-process collectives (Gloo, MPI) are set only by jaxlib's own C++ client, never
// through the C API. With process_id (0.115) a client numbers its devices for that process,
// but lists only its own. So a "group" on it would be N unrelated clients whose collectives
// never meet.
type SingleProcessError struct {
	Path  string
	Nodes int
}

func (e *SingleProcessError) Error() string {
	return fmt.Sprintf("a run on %d nodes needs a PJRT plugin that joins several processes into one client, "+
		"and XLA's CPU plugin (%s) does not: its PJRT_Client_Create takes no node_id/num_nodes and never calls "+
		"the key-value store, so each process would see only its own devices and no collective would cross "+
		"processes; use a GPU plugin (--backend xla:cuda: NCCL across processes), or one process", e.Nodes, e.Path)
}
