//go:build ((linux && amd64) || darwin) && !noxla && cgo

package xlaplugin

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// memKV is an in-memory KeyValueStore with blocking gets.
type memKV struct {
	mu     sync.Mutex
	cond   *sync.Cond
	values map[string][]byte
}

func newMemKV() *memKV {
	kv := &memKV{values: map[string][]byte{}}
	kv.cond = sync.NewCond(&kv.mu)
	return kv
}

type timeoutError struct{}

func (timeoutError) Error() string { return "timed out" }
func (timeoutError) Timeout() bool { return true }

func (kv *memKV) Get(key string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { kv.mu.Lock(); kv.cond.Broadcast(); kv.mu.Unlock() })
	defer stop.Stop()
	kv.mu.Lock()
	defer kv.mu.Unlock()
	for {
		if v, ok := kv.values[key]; ok {
			return v, nil
		}
		if !time.Now().Before(deadline) {
			return nil, timeoutError{}
		}
		kv.cond.Wait()
	}
}

func (kv *memKV) TryGet(key string) ([]byte, bool, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.values[key]
	return v, ok, nil
}

func (kv *memKV) Put(key string, value []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.values[key] = value
	kv.cond.Broadcast()
	return nil
}

// TestKeyValueHook: go-xla creates its clients without key-value callbacks; through stx's hook
// on PJRT_Client_Create a plugin gets them once SetCluster made this process a node, and two
// clients (as two nodes) exchange their topologies through the store, with the error codes a
// plugin expects (NOT_FOUND, DEADLINE_EXCEEDED); then the client's place (process index,
// every node's devices, its own) is read back. Both for a plugin of go-xla's header version
// and for a newer one behind the padding wrapper.
func TestKeyValueHook(t *testing.T) {
	defer SetCluster(nil)
	for _, minor := range []string{"83", "100"} {
		t.Run("PJRT 0."+minor, func(t *testing.T) {
			so := filepath.Join(t.TempDir(), "pjrt_c_api_kv"+minor+"_plugin.so")
			cc(t, "-shared", "-fPIC", "-O1", "-DMINOR="+minor, "-o", so, "testdata/kvplugin.c")
			if _, err := Load(so); err != nil {
				t.Fatal(err)
			}
			plugin, err := pjrt.GetPlugin(so)
			if err != nil {
				t.Fatal(err)
			}
			SetCluster(nil)
			if _, err := plugin.NewClient(nil); err == nil || !strings.Contains(err.Error(), "no key-value callbacks") {
				t.Fatalf("a client outside a group: %v", err)
			}
			kv := newMemKV()
			SetCluster(&Cluster{Node: 0, Nodes: 2, KV: kv})
			calls := KeyValueCalls()
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for node := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// The second node comes later: the first waits for its topology.
					time.Sleep(time.Duration(node) * 50 * time.Millisecond)
					var c *pjrt.Client
					c, errs[node] = plugin.NewClient(pjrt.NamedValuesMap{"node_id": int64(node), "num_nodes": int64(2)})
					if errs[node] == nil && c.ProcessIndex() != node {
						errs[node] = errors.New("wrong process index")
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"pjrt/fake/node/0", "pjrt/fake/node/1"} {
				if _, ok, _ := kv.TryGet(k); !ok {
					t.Errorf("the store lacks %s", k)
				}
			}
			// Per node: a put, two gets, a try-get and a timed-out get.
			if got := KeyValueCalls() - calls; got != 10 {
				t.Errorf("%d key-value calls, want 10", got)
			}
			if top, ok := LastClient(); !ok || top.Devices != 2 || top.Addressable != 1 {
				t.Errorf("last client: %+v (%v), want 2 devices of which 1 addressable", top, ok)
			}
		})
	}
}

// TestClusterOptions: a GPU plugin is told its node; XLA's CPU plugin is refused, with why.
func TestClusterOptions(t *testing.T) {
	defer SetCluster(nil)
	SetCluster(nil)
	if o, err := ClusterOptions("/x/xla_cuda_plugin.so"); o != nil || err != nil {
		t.Errorf("outside a group: %v, %v", o, err)
	}
	SetCluster(&Cluster{Node: 1, Nodes: 4, KV: newMemKV()})
	o, err := ClusterOptions("/x/xla_cuda_plugin.so")
	if err != nil || o["node_id"] != int64(1) || o["num_nodes"] != int64(4) {
		t.Errorf("CUDA plugin: %v, %v", o, err)
	}
	_, err = ClusterOptions("/x/pjrt_c_api_cpu_plugin.so")
	var single *SingleProcessError
	if !errors.As(err, &single) || !strings.Contains(err.Error(), "a run on 4 nodes needs a PJRT plugin that joins several processes") {
		t.Errorf("CPU plugin: %v", err)
	}
}

// TestCPUPluginStaysInOneProcess pins what XLA's CPU plugins do with the options and the
// callbacks of a multi-process client, the reason stx refuses several nodes on them: the
// callbacks are never called, the client lists only its own devices, and node_id/num_nodes
// are refused (PJRT 0.115: "Unexpected option name passed to
// PJRT_Client_Create: node_id") or ignored (0.81, 0.106); process_id (0.115) numbers the devices
// for the process but adds no other process's. Should a plugin version join processes, this fails and
// the refusal (SingleProcessError) must be revisited.
func TestCPUPluginStaysInOneProcess(t *testing.T) {
	found := Fetched()
	if len(found) == 0 {
		dir, _ := Dir()
		if os.Getenv("CI") == "true" {
			t.Fatalf("no XLA CPU PJRT plugin in %q: run scripts/fetch-pjrt.sh", dir)
		}
		t.Skipf("no XLA CPU PJRT plugin in %q (scripts/fetch-pjrt.sh installs them)", dir)
	}
	defer SetCluster(nil)
	for _, path := range found {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			p, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			plugin, err := pjrt.GetPlugin(path)
			if err != nil {
				t.Fatal(err)
			}
			SetCluster(&Cluster{Node: 1, Nodes: 2, KV: newMemKV()})
			calls := KeyValueCalls()
			c, err := plugin.NewClient(pjrt.NamedValuesMap{"cpu_device_count": int64(2), "process_id": int64(1)})
			if err != nil {
				t.Fatal(err)
			}
			top, _ := LastClient()
			all, err := c.AllDevices()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("PJRT %s with process_id 1: process index %d, devices %d, addressable %d, key-value calls %d",
				p.Version(), top.ProcessIndex, top.Devices, top.Addressable, KeyValueCalls()-calls)
			if top.Devices != 2 || top.Addressable != 2 || len(all) != 2 || KeyValueCalls() != calls {
				t.Errorf("PJRT %s: %+v, %d devices, %d key-value calls: the plugin may now join processes", p.Version(), top, len(all), KeyValueCalls()-calls)
			}
			_, err = plugin.NewClient(pjrt.NamedValuesMap{"cpu_device_count": int64(1), "node_id": int64(1), "num_nodes": int64(2)})
			t.Logf("PJRT %s with node_id and num_nodes: %v", p.Version(), err)
			refused := regexp.MustCompile(`Unexpected option name passed to PJRT_Client_Create: (node_id|num_nodes)$`)
			// Refused by name (0.115) or ignored (0.81, and 0.106 of zml's build that
			// fastatomstruct-xla-cpu 2026.6.23 ships): either way no multi-process client.
			if err != nil && !refused.MatchString(err.Error()) {
				t.Errorf("PJRT %s refused node_id otherwise: %v", p.Version(), err)
			}
			if top, _ := LastClient(); err == nil && (top.Devices != 1 || top.ProcessIndex != 0) {
				t.Errorf("PJRT %s with node_id 1 of 2: %+v", p.Version(), top)
			}
		})
	}
}
