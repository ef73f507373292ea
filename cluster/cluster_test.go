package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fast detects a lost node within a fraction of a second; calm, for the tests whose nodes send
// no heartbeats, never.
var (
	fast = Options{Heartbeat: 20 * time.Millisecond, Lost: 200 * time.Millisecond}
	calm = Options{Heartbeat: time.Second, Lost: time.Hour}
)

// group starts a coordinator on a free loopback port and joins nodes clients to it.
func group(t *testing.T, nodes int, opt Options) (*Coordinator, []*Client) {
	t.Helper()
	coord, err := Serve("127.0.0.1:0", nodes, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coord.Close(0) })
	clients := make([]*Client, nodes)
	for i := range clients {
		if clients[i], err = Join(context.Background(), coord.Addr(), i, nodes, time.Second, opt); err != nil {
			t.Fatal(err)
		}
	}
	return coord, clients
}

func TestKeyValue(t *testing.T) {
	_, c := group(t, 2, calm)
	ctx := context.Background()
	// A blocking get waits for the other node's put.
	got := make(chan []byte, 1)
	go func() {
		v, err := c[1].Get(ctx, "topology/0", 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(50 * time.Millisecond)
	value := []byte("a\x00binary\xffvalue")
	if err := c[0].Put(ctx, "topology/0", value); err != nil {
		t.Fatal(err)
	}
	if v := <-got; string(v) != string(value) {
		t.Errorf("get: %q, want %q", v, value)
	}
	for _, tc := range []struct {
		key   string
		found bool
	}{{"topology/0", true}, {"topology/1", false}, {"", false}} {
		v, found, err := c[1].TryGet(ctx, tc.key)
		if err != nil || found != tc.found || (found && string(v) != string(value)) {
			t.Errorf("try-get %q: %q %v %v, want found=%v", tc.key, v, found, err, tc.found)
		}
	}
	// An empty value is a value; a later put replaces the earlier one.
	if err := c[1].Put(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, found, err := c[0].TryGet(ctx, "empty"); err != nil || !found || len(v) != 0 {
		t.Errorf("empty value: %q %v %v", v, found, err)
	}
	_ = c[1].Put(ctx, "empty", []byte("x"))
	if v, _ := c[0].Get(ctx, "empty", time.Second); string(v) != "x" {
		t.Errorf("replaced value: %q", v)
	}
	start := time.Now()
	_, err := c[0].Get(ctx, "never", 100*time.Millisecond)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), `"never"`) || time.Since(start) < 100*time.Millisecond {
		t.Errorf("get of a missing key: %v after %s", err, time.Since(start))
	}
}

func TestBarrier(t *testing.T) {
	_, c := group(t, 3, calm)
	ctx := context.Background()
	// Nodes 0 and 2 alone time out, naming node 1.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for _, n := range []int{0, 2} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[n] = c[n].Barrier(ctx, "early", 150*time.Millisecond) }()
	}
	wg.Wait()
	for _, n := range []int{0, 2} {
		if !errors.Is(errs[n], ErrTimeout) || !strings.Contains(errs[n].Error(), "waiting for node(s) 1") {
			t.Errorf("node %d: %v", n, errs[n])
		}
	}
	// All three pass, whatever their order.
	for n := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(n) * 30 * time.Millisecond)
			errs[n] = c[n].Barrier(ctx, "all", 5*time.Second)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}

func TestJoinRefusals(t *testing.T) {
	coord, _ := group(t, 2, calm)
	ctx := context.Background()
	for _, tc := range []struct {
		node, nodes int
		err         string
	}{
		{1, 2, "node 1 joined twice: two processes were started with node rank 1"},
		{1, 3, "node 1 was started for 3 node(s), the coordinator (node 0) for 2"},
		{2, 2, "node 2 is not in the group of 2 node(s) (0–1)"},
	} {
		_, err := Join(ctx, coord.Addr(), tc.node, tc.nodes, time.Second, fast)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("join %d/%d: %v, want %q", tc.node, tc.nodes, err, tc.err)
		}
	}
	// Nobody listening: the join retries until its timeout and says so.
	coord2, err := Serve("127.0.0.1:0", 1, fast)
	if err != nil {
		t.Fatal(err)
	}
	addr := coord2.Addr()
	_ = coord2.Close(0)
	_, err = Join(ctx, addr, 1, 2, 300*time.Millisecond, fast)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("node 1: the coordinator (node 0) at %s did not answer within 300ms", addr)) {
		t.Errorf("no coordinator: %v", err)
	}
}

// TestFailures: a node that stops its heartbeats (a dead process), a node that reports an
// error, and a dead coordinator each stop every other node with an error that says which.
func TestFailures(t *testing.T) {
	ctx := context.Background()
	failures := func(clients []*Client) chan error {
		ch := make(chan error, len(clients))
		for _, c := range clients {
			c.StartHeartbeat(func(err error) { ch <- err })
		}
		return ch
	}
	for _, tc := range []struct {
		name string
		kill func(coord *Coordinator, c []*Client) []*Client // returns the survivors
		want string
	}{
		{"lost node", func(_ *Coordinator, c []*Client) []*Client { c[2].stopHeartbeat(); return c[:2] },
			"node(s) 2 lost: no heartbeat for 200ms"},
		{"node error", func(_ *Coordinator, c []*Client) []*Client {
			c[1].Fail(errors.New("out of memory"))
			return []*Client{c[0], c[2]}
		}, "node 1 failed: out of memory"},
		{"dead coordinator", func(coord *Coordinator, c []*Client) []*Client {
			c[0].stopHeartbeat()
			_ = coord.Close(0)
			return c[1:]
		}, "the coordinator (node 0) at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord, c := group(t, 3, fast)
			failed := failures(c)
			// A survivor blocked in a barrier the lost node never reaches is woken too.
			blocked := make(chan error, 1)
			go func() { blocked <- c[1].Barrier(ctx, "never", 10*time.Second) }()
			survivors := tc.kill(coord, c)
			for range survivors {
				select {
				case err := <-failed:
					if !errors.Is(err, ErrGroupFailed) || !strings.Contains(err.Error(), tc.want) {
						t.Errorf("failure: %v, want %q", err, tc.want)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a surviving node was not told")
				}
			}
			select {
			case err := <-blocked:
				if err == nil {
					t.Error("the barrier passed")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the blocked barrier did not return")
			}
			for _, s := range survivors {
				s.stopHeartbeat()
			}
		})
	}
}

// TestCloseWaitsForNodes: node 0's coordinator keeps serving until the others left.
func TestCloseWaitsForNodes(t *testing.T) {
	coord, c := group(t, 2, calm)
	closed := make(chan struct{})
	go func() { _ = coord.Close(5 * time.Second); close(closed) }()
	c[0].Leave()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("closed before node 1 left")
	default:
	}
	if err := c[1].Put(context.Background(), "last", []byte("word")); err != nil {
		t.Fatal(err)
	}
	c[1].Leave()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed after every node left")
	}
}
