package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options tune the failure detection; zero fields take the defaults.
type Options struct {
	// Heartbeat is how often a node tells the coordinator it is alive (default 1s).
	Heartbeat time.Duration
	// Lost is how long the coordinator waits without a node's heartbeat before it fails the
	// group (default 15s: a loaded machine can miss a few beats; a dead process stops them all).
	Lost time.Duration
}

func (o Options) withDefaults() Options {
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.Lost <= 0 {
		o.Lost = 15 * o.Heartbeat
	}
	return o
}

// maxValue bounds a value's size: the store carries topologies and ids (kilobytes), not tensors.
const maxValue = 64 << 20

// Coordinator is node 0's server of the store.
type Coordinator struct {
	store *store
	srv   *http.Server
	ln    net.Listener
	done  chan struct{}
	once  sync.Once
}

// Serve starts the coordinator of a group of nodes on addr (host:port; node 0 serves on the
// address every node was given; when its host is not an address of this machine, as behind a
// service name, it serves on every interface at that port).
func Serve(addr string, nodes int, opt Options) (*Coordinator, error) {
	if nodes < 1 {
		return nil, fmt.Errorf("a group needs at least one node, got %d", nodes)
	}
	opt = opt.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		_, port, _ := net.SplitHostPort(addr)
		ln, err = net.Listen("tcp", ":"+port)
	}
	if err != nil {
		return nil, fmt.Errorf("serving the coordinator on %s: %w", addr, err)
	}
	c := &Coordinator{store: newStore(nodes), ln: ln, done: make(chan struct{})}
	c.srv = &http.Server{Handler: c.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	go c.watch(opt)
	return c, nil
}

// Addr is the address the coordinator listens on (its port, when addr's was 0).
func (c *Coordinator) Addr() string { return c.ln.Addr().String() }

// Fail fails the group, as a node's report does (node 0 uses it when its own run fails).
func (c *Coordinator) Fail(err error) { c.store.fail(err) }

// Close stops serving once every node that joined has left, or after wait: node 0 ends last,
// so that the others' final requests are answered.
func (c *Coordinator) Close(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for !c.store.allLeft() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var err error
	c.once.Do(func() {
		close(c.done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err = c.srv.Shutdown(ctx); err != nil {
			err = c.srv.Close()
		}
	})
	return err
}

// watch fails the group when a node's heartbeats stop.
func (c *Coordinator) watch(opt Options) {
	t := time.NewTicker(opt.Heartbeat / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.store.checkHeartbeats(opt.Lost)
		}
	}
}

// The HTTP protocol: every request names its node; values are raw bodies.
//
//	POST /v1/join?node=N&nodes=M       join the group (M: the group size the node was started with)
//	PUT  /v1/kv?key=K                  put
//	GET  /v1/kv?key=K                  try-get: 404 when absent
//	GET  /v1/kv?key=K&wait_ms=T        get, waiting up to T ms: 504 on timeout
//	POST /v1/barrier?name=B&node=N&wait_ms=T
//	POST /v1/heartbeat?node=N
//	POST /v1/fail?node=N               body: the node's error; fails the group
//	POST /v1/leave?node=N              the node ended normally
//
// A failed group answers 410 with the failure; a bad request 400; a refused join 409.
func (c *Coordinator) handler() http.Handler {
	mux := http.NewServeMux()
	s := c.store
	mux.HandleFunc("POST /v1/join", func(w http.ResponseWriter, r *http.Request) {
		node, err1 := intParam(r, "node")
		nodes, err2 := intParam(r, "nodes")
		if err := errors.Join(err1, err2); err != nil {
			reply(w, err)
			return
		}
		if err := s.join(node, nodes); err != nil && !errors.Is(err, ErrGroupFailed) {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		} else if err != nil {
			reply(w, err)
			return
		}
	})
	mux.HandleFunc("PUT /v1/kv", func(w http.ResponseWriter, r *http.Request) {
		value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValue))
		if err != nil {
			reply(w, fmt.Errorf("reading the value: %w", err))
			return
		}
		reply(w, s.put(r.URL.Query().Get("key"), value))
	})
	mux.HandleFunc("GET /v1/kv", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if r.URL.Query().Get("wait_ms") == "" {
			v, ok, err := s.tryGet(key)
			if err == nil && !ok {
				http.Error(w, fmt.Sprintf("key %q not found", key), http.StatusNotFound)
				return
			}
			replyValue(w, v, err)
			return
		}
		deadline, err := deadlineParam(r)
		if err != nil {
			reply(w, err)
			return
		}
		v, err := s.get(key, deadline, r.Context().Done())
		replyValue(w, v, err)
	})
	mux.HandleFunc("POST /v1/barrier", func(w http.ResponseWriter, r *http.Request) {
		node, err1 := intParam(r, "node")
		deadline, err2 := deadlineParam(r)
		if err := errors.Join(err1, err2); err != nil {
			reply(w, err)
			return
		}
		reply(w, s.barrier(r.URL.Query().Get("name"), node, deadline, r.Context().Done()))
	})
	mux.HandleFunc("POST /v1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		node, err := intParam(r, "node")
		if err != nil {
			reply(w, err)
			return
		}
		reply(w, s.heartbeat(node))
	})
	mux.HandleFunc("POST /v1/fail", func(w http.ResponseWriter, r *http.Request) {
		node, err := intParam(r, "node")
		if err != nil {
			reply(w, err)
			return
		}
		msg, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		s.leave(node) // a failed node stops: node 0 need not wait for it to leave
		s.fail(fmt.Errorf("node %d failed: %s", node, strings.TrimSpace(string(msg))))
	})
	mux.HandleFunc("POST /v1/leave", func(w http.ResponseWriter, r *http.Request) {
		node, err := intParam(r, "node")
		if err != nil {
			reply(w, err)
			return
		}
		s.leave(node)
	})
	return mux
}

func intParam(r *http.Request, name string) (int, error) {
	v := r.URL.Query().Get(name)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("parameter %s=%q: want an integer", name, v)
	}
	return n, nil
}

func deadlineParam(r *http.Request) (time.Time, error) {
	ms, err := intParam(r, "wait_ms")
	if err != nil || ms < 0 {
		return time.Time{}, fmt.Errorf("parameter wait_ms=%q: want milliseconds ≥ 0", r.URL.Query().Get("wait_ms"))
	}
	return time.Now().Add(time.Duration(ms) * time.Millisecond), nil
}

// reply writes err's status: 200, 410 (group failed), 504 (timeout), 400.
func reply(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrGroupFailed):
		http.Error(w, err.Error(), http.StatusGone)
	case errors.Is(err, ErrTimeout):
		http.Error(w, err.Error(), http.StatusGatewayTimeout)
	default:
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

func replyValue(w http.ResponseWriter, v []byte, err error) {
	if err != nil {
		reply(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(v)
}
