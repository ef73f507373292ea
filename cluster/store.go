// Package cluster is the coordination service of a run spread over several processes (nodes):
// a key-value store with blocking reads and barriers, served over HTTP by node 0 and used by
// every node (node 0 too) as a client. It plays the part JAX's coordination service plays for
// a multi-process JAX program: the PJRT plugins exchange their topology and their collectives'
// ids through it (PJRT_Client_Create's key-value callbacks), and stx's own agreements (the
// recipe every node runs) go through it.
//
// It also watches the nodes: each node sends a heartbeat; a node whose heartbeats stop, or that
// reports an error, fails the whole group, and every node's next request (or its heartbeat)
// returns that failure, so that all processes stop with the same clear error instead of
// waiting in a collective that will never complete.
package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrTimeout is returned (wrapped) by a blocking read or a barrier that did not complete in time.
var ErrTimeout = errors.New("timed out")

// ErrGroupFailed is returned (wrapped, with the cause) by every operation once a node of the
// group was lost or reported an error.
var ErrGroupFailed = errors.New("the group of nodes failed")

// store is the coordinator's state: the key-value map, barriers, and what it knows of each node.
// Every blocked reader waits on changed, which is closed and replaced at every change.
type store struct {
	mu      sync.Mutex
	nodes   int
	values  map[string][]byte
	arrived map[string]map[int]bool // barrier name → nodes arrived
	joined  map[int]bool
	left    map[int]bool
	beat    map[int]time.Time
	failed  error
	changed chan struct{}
	now     func() time.Time
}

func newStore(nodes int) *store {
	return &store{
		nodes: nodes, values: map[string][]byte{}, arrived: map[string]map[int]bool{},
		joined: map[int]bool{}, left: map[int]bool{}, beat: map[int]time.Time{},
		changed: make(chan struct{}), now: time.Now,
	}
}

// notify wakes every waiter; the caller holds mu.
func (s *store) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// checkNode refuses a node number outside the group.
func (s *store) checkNode(node int) error {
	if node < 0 || node >= s.nodes {
		return fmt.Errorf("node %d is not in the group of %d node(s) (0–%d)", node, s.nodes, s.nodes-1)
	}
	return nil
}

// join records a node. nodes is the group size the node was started with, which must be the
// coordinator's; a node joins once (a second process with the same rank is a launch error).
func (s *store) join(node, nodes int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	if nodes != s.nodes {
		return fmt.Errorf("node %d was started for %d node(s), the coordinator (node 0) for %d", node, nodes, s.nodes)
	}
	if err := s.checkNode(node); err != nil {
		return err
	}
	if s.joined[node] {
		return fmt.Errorf("node %d joined twice: two processes were started with node rank %d", node, node)
	}
	s.joined[node] = true
	s.beat[node] = s.now()
	s.notify()
	return nil
}

func (s *store) put(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	s.values[key] = slices.Clone(value)
	s.notify()
	return nil
}

// tryGet returns the value of key, if it is there.
func (s *store) tryGet(key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return nil, false, s.failed
	}
	v, ok := s.values[key]
	return v, ok, nil
}

// get waits until key has a value, the deadline passes (ErrTimeout) or the group fails; done
// ends the wait early (the request was cancelled).
func (s *store) get(key string, deadline time.Time, done <-chan struct{}) ([]byte, error) {
	for {
		s.mu.Lock()
		if s.failed != nil {
			s.mu.Unlock()
			return nil, s.failed
		}
		if v, ok := s.values[key]; ok {
			s.mu.Unlock()
			return v, nil
		}
		changed := s.changed
		s.mu.Unlock()
		if err := wait(changed, deadline, done); err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
	}
}

// barrier records node's arrival at the barrier name and waits until every node of the group
// has arrived. A timeout names the nodes still missing.
func (s *store) barrier(name string, node int, deadline time.Time, done <-chan struct{}) error {
	s.mu.Lock()
	if err := s.checkNode(node); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.arrived[name] == nil {
		s.arrived[name] = map[int]bool{}
	}
	s.arrived[name][node] = true
	s.notify()
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if s.failed != nil {
			s.mu.Unlock()
			return s.failed
		}
		missing := s.missing(s.arrived[name])
		changed := s.changed
		s.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		if err := wait(changed, deadline, done); err != nil {
			return fmt.Errorf("barrier %q: waiting for node(s) %s: %w", name, join(missing), err)
		}
	}
}

// missing lists the nodes not in set; the caller holds mu.
func (s *store) missing(set map[int]bool) []int {
	var out []int
	for n := range s.nodes {
		if !set[n] {
			out = append(out, n)
		}
	}
	return out
}

// heartbeat records that node is alive and returns the group's failure, if any.
func (s *store) heartbeat(node int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	if err := s.checkNode(node); err != nil {
		return err
	}
	s.beat[node] = s.now()
	return nil
}

// fail marks the group failed (the first failure is kept) and wakes every waiter.
func (s *store) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: %w", ErrGroupFailed, err)
		s.notify()
	}
}

// leave records that node ended normally: its heartbeats are no longer expected.
func (s *store) leave(node int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left[node] = true
	s.notify()
}

// allLeft says whether every node that joined has left.
func (s *store) allLeft() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.joined {
		if !s.left[n] {
			return false
		}
	}
	return true
}

// checkHeartbeats fails the group when a node that joined and has not left sent no heartbeat
// for longer than lost.
func (s *store) checkHeartbeats(lost time.Duration) {
	s.mu.Lock()
	now := s.now()
	var dead []int
	for n := range s.joined {
		if !s.left[n] && now.Sub(s.beat[n]) > lost {
			dead = append(dead, n)
		}
	}
	for _, n := range dead {
		s.left[n] = true // gone: nobody waits for it to leave
	}
	s.mu.Unlock()
	if len(dead) > 0 {
		slices.Sort(dead)
		s.fail(fmt.Errorf("node(s) %s lost: no heartbeat for %s (the process died or its machine is unreachable)", join(dead), lost))
	}
}

// wait blocks until changed is closed (nil), the deadline passes (ErrTimeout) or done is closed.
func wait(changed <-chan struct{}, deadline time.Time, done <-chan struct{}) error {
	d := time.Until(deadline)
	if d <= 0 {
		return ErrTimeout
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
		return nil
	case <-t.C:
		return ErrTimeout
	case <-done:
		return errors.New("cancelled")
	}
}

func join(nodes []int) string {
	s := make([]string, len(nodes))
	for i, n := range nodes {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}
