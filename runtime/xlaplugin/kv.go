//go:build ((linux && amd64) || darwin) && !noxla && cgo

package xlaplugin

/*
#include <stdlib.h>
#include "kv.h"
*/
import "C"

import (
	"context"
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// PJRT_Error_Code values the callbacks return (absl's status codes).
const (
	codeDeadlineExceeded = 4
	codeNotFound         = 5
	codeUnavailable      = 14
)

var (
	clusterMu sync.RWMutex
	group     *Cluster
)

// SetCluster makes the PJRT clients created from now on join the group c describes (nil: a
// client of this process alone, the default). Their plugin gets c's key-value store as its
// PJRT_Client_Create callbacks, and ClusterOptions names this node to it.
func SetCluster(c *Cluster) {
	clusterMu.Lock()
	defer clusterMu.Unlock()
	group = c
	on := 0
	if c != nil {
		on = 1
	}
	C.stx_kv_enable(C.int(on))
}

func currentCluster() *Cluster {
	clusterMu.RLock()
	defer clusterMu.RUnlock()
	return group
}

// ClusterOptions are the PJRT_Client_Create options that make the plugin at path a node of the
// group set by SetCluster: none without a group; node_id and num_nodes for the GPU plugins
// (CUDA, ROCm), which read them with the key-value callbacks. XLA's CPU plugin is refused (see
// ErrCPUPluginSingleProcess).
func ClusterOptions(path string) (pjrt.NamedValuesMap, error) {
	c := currentCluster()
	if c == nil {
		return nil, nil
	}
	if isCPUPlugin(path) {
		return nil, &SingleProcessError{Path: path, Nodes: c.Nodes}
	}
	return pjrt.NamedValuesMap{"node_id": int64(c.Node), "num_nodes": int64(c.Nodes)}, nil
}

// LastClient reports the process index and the device counts of the last PJRT client created
// through a plugin stx loaded, and whether one was created.
func LastClient() (Topology, bool) {
	var t C.stx_client_topology
	C.stx_last_client(&t)
	return Topology{ProcessIndex: int(t.process_index), Devices: int(t.devices), Addressable: int(t.addressable)}, t.created > 0
}

// KeyValueCalls counts the key-value callbacks plugins made in this process.
func KeyValueCalls() int64 { return int64(C.stx_kv_calls()) }

// hook returns api's table with the PJRT_Client_Create hook (kv.c).
func hook(api unsafe.Pointer, structSize C.size_t) unsafe.Pointer {
	return C.stx_plugin_hook(api, structSize)
}

// errMessage returns msg as a C string for kv.c, which frees it.
func errMessage(err error) *C.char { return C.CString(err.Error()) }

// errCode is the PJRT error code of a store's error.
func errCode(err error) C.int {
	var timeout interface{ Timeout() bool }
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &timeout) && timeout.Timeout()) {
		return codeDeadlineExceeded
	}
	return codeUnavailable
}

// stxKVGet serves a plugin's get (waiting up to timeoutMs) and try-get (try ≠ 0: at once).
// The value is malloc'ed; the plugin frees it with the deleter kv.c hands it.
//
//export stxKVGet
func stxKVGet(key *C.char, keySize C.size_t, try C.int, timeoutMs C.int, value **C.char, valueSize *C.size_t, msg **C.char) C.int {
	c := currentCluster()
	if c == nil {
		*msg = C.CString("stx: no key-value store (this process is not part of a group of nodes)")
		return codeUnavailable
	}
	k := clusterKey(C.GoStringN(key, C.int(keySize)))
	var (
		v   []byte
		err error
	)
	if try != 0 {
		var found bool
		v, found, err = c.KV.TryGet(k)
		if err == nil && !found {
			*msg = C.CString("key " + k + " not found")
			return codeNotFound
		}
	} else {
		v, err = c.KV.Get(k, time.Duration(max(timeoutMs, 0))*time.Millisecond)
	}
	if err != nil {
		*msg = errMessage(err)
		return errCode(err)
	}
	if len(v) == 0 {
		*value = (*C.char)(C.malloc(1)) // a valid pointer for an empty value
	} else {
		*value = (*C.char)(C.CBytes(v))
	}
	*valueSize = C.size_t(len(v))
	return 0
}

// stxKVPut serves a plugin's put.
//
//export stxKVPut
func stxKVPut(key *C.char, keySize C.size_t, value *C.char, valueSize C.size_t, msg **C.char) C.int {
	c := currentCluster()
	if c == nil {
		*msg = C.CString("stx: no key-value store (this process is not part of a group of nodes)")
		return codeUnavailable
	}
	if err := c.KV.Put(clusterKey(C.GoStringN(key, C.int(keySize))), C.GoBytes(unsafe.Pointer(value), C.int(valueSize))); err != nil {
		*msg = errMessage(err)
		return errCode(err)
	}
	return 0
}
