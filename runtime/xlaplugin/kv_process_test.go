//go:build ((linux && amd64) || darwin) && !noxla && cgo

package xlaplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/go-xla/pkg/pjrt"

	"stx.dev/stx/cluster"
)

// clusterKV is the group's store (package cluster) as a KeyValueStore, as stx run uses it.
type clusterKV struct{ c *cluster.Client }

type storeTimeout struct{ error }

func (storeTimeout) Timeout() bool { return true }

func (s clusterKV) Get(key string, timeout time.Duration) ([]byte, error) {
	v, err := s.c.Get(context.Background(), key, timeout)
	if errors.Is(err, cluster.ErrTimeout) {
		return nil, storeTimeout{err}
	}
	return v, err
}
func (s clusterKV) TryGet(key string) ([]byte, bool, error) {
	return s.c.TryGet(context.Background(), key)
}
func (s clusterKV) Put(key string, value []byte) error {
	return s.c.Put(context.Background(), key, value)
}

// TestKeyValueHookAcrossProcesses: two processes (this test binary, run again as node 0 and
// node 1) join a coordinator over loopback and each creates a PJRT client of the test plugin
// as a node of the group; the plugins exchange their topologies through the coordinator's
// store, by the callbacks the hook filled in.
func TestKeyValueHookAcrossProcesses(t *testing.T) {
	if node := os.Getenv("STX_KV_TEST_NODE"); node != "" {
		kvTestNode(t, node)
		return
	}
	so := filepath.Join(t.TempDir(), "pjrt_c_api_kvproc_plugin.so")
	cc(t, "-shared", "-fPIC", "-O1", "-DMINOR=115", "-o", so, "testdata/kvplugin.c")
	coord, err := cluster.Serve("127.0.0.1:0", 2, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close(0)
	var wg sync.WaitGroup
	out := make([][]byte, 2)
	errs := make([]error, 2)
	for node := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestKeyValueHookAcrossProcesses$", "-test.v")
			cmd.Env = append(os.Environ(), "STX_KV_TEST_NODE="+strconv.Itoa(node), "STX_KV_TEST_ADDR="+coord.Addr(), "STX_KV_TEST_PLUGIN="+so)
			out[node], errs[node] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for node := range 2 {
		want := fmt.Sprintf("node %d: process index %d, 2 devices, 1 addressable", node, node)
		if errs[node] != nil || !strings.Contains(string(out[node]), want) {
			t.Errorf("node %d: %v, want %q in:\n%s", node, errs[node], want, out[node])
		}
	}
}

// kvTestNode is one node of TestKeyValueHookAcrossProcesses.
func kvTestNode(t *testing.T, nodeVar string) {
	node, _ := strconv.Atoi(nodeVar)
	c, err := cluster.Join(context.Background(), os.Getenv("STX_KV_TEST_ADDR"), node, 2, 10*time.Second, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Leave()
	path := os.Getenv("STX_KV_TEST_PLUGIN")
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
	plugin, err := pjrt.GetPlugin(path)
	if err != nil {
		t.Fatal(err)
	}
	SetCluster(&Cluster{Node: node, Nodes: 2, KV: clusterKV{c}})
	defer SetCluster(nil)
	options, err := ClusterOptions(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugin.NewClient(options); err != nil {
		t.Fatal(err)
	}
	top, _ := LastClient()
	t.Logf("node %d: process index %d, %d devices, %d addressable", node, top.ProcessIndex, top.Devices, top.Addressable)
}
