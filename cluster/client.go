package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client is one node's connection to the coordinator.
type Client struct {
	// Node is this node's rank; Nodes the group size.
	Node, Nodes int
	addr        string
	http        *http.Client
	opt         Options

	stopOnce sync.Once
	stop     chan struct{}
	beats    sync.WaitGroup
}

// remoteError is an error the coordinator answered; Is matches its kind (ErrGroupFailed,
// ErrTimeout) so that callers can tell them apart.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string        { return e.msg }
func (e *remoteError) Is(target error) bool { return e.kind != nil && target == e.kind }

// Join connects node (of nodes) to the coordinator at addr, retrying until it answers (node 0
// may start after the others) or timeout passes, and registers it. The coordinator refuses a
// node started with another group size or a rank that already joined.
func Join(ctx context.Context, addr string, node, nodes int, timeout time.Duration, opt Options) (*Client, error) {
	c := &Client{Node: node, Nodes: nodes, addr: addr, http: &http.Client{}, opt: opt.withDefaults(), stop: make(chan struct{})}
	deadline := time.Now().Add(timeout)
	q := url.Values{"node": {strconv.Itoa(node)}, "nodes": {strconv.Itoa(nodes)}}
	for {
		reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.do(reqCtx, http.MethodPost, "/v1/join", q, nil)
		cancel()
		var remote *remoteError
		switch {
		case err == nil:
			return c, nil
		case errors.As(err, &remote), ctx.Err() != nil:
			return nil, fmt.Errorf("node %d joining the coordinator at %s: %w", node, addr, err)
		case time.Now().After(deadline):
			return nil, fmt.Errorf("node %d: the coordinator (node 0) at %s did not answer within %s: %w", node, addr, timeout, err)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// do sends one request; a non-2xx answer becomes a remoteError with the coordinator's message.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte) ([]byte, error) {
	u := "http://" + c.addr + path + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("coordinator request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxValue+1))
	if err != nil {
		return nil, fmt.Errorf("reading the coordinator's answer: %w", err)
	}
	if resp.StatusCode/100 == 2 {
		return data, nil
	}
	e := &remoteError{msg: strings.TrimSpace(string(data))}
	switch resp.StatusCode {
	case http.StatusGone:
		e.kind = ErrGroupFailed
	case http.StatusGatewayTimeout:
		e.kind = ErrTimeout
	case http.StatusNotFound:
		e.kind = errNotFound
	}
	return nil, e
}

var errNotFound = errors.New("not found")

// Put stores value under key (a later Put replaces it).
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	if _, err := c.do(ctx, http.MethodPut, "/v1/kv", url.Values{"key": {key}}, value); err != nil {
		return fmt.Errorf("putting %q: %w", key, err)
	}
	return nil
}

// Get waits up to timeout for key to have a value.
func (c *Client) Get(ctx context.Context, key string, timeout time.Duration) ([]byte, error) {
	ms := max(timeout.Milliseconds(), 0)
	v, err := c.do(ctx, http.MethodGet, "/v1/kv", url.Values{"key": {key}, "wait_ms": {strconv.FormatInt(ms, 10)}}, nil)
	if err != nil {
		return nil, fmt.Errorf("getting %q: %w", key, err)
	}
	return v, nil
}

// TryGet returns key's value and true, or false at once when it has none.
func (c *Client) TryGet(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := c.do(ctx, http.MethodGet, "/v1/kv", url.Values{"key": {key}}, nil)
	if errors.Is(err, errNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("getting %q: %w", key, err)
	}
	return v, true, nil
}

// Barrier waits up to timeout until every node reached the barrier name. A name is used once
// per run (every node passes the same names in the same order).
func (c *Client) Barrier(ctx context.Context, name string, timeout time.Duration) error {
	q := url.Values{"name": {name}, "node": {strconv.Itoa(c.Node)}, "wait_ms": {strconv.FormatInt(max(timeout.Milliseconds(), 0), 10)}}
	if _, err := c.do(ctx, http.MethodPost, "/v1/barrier", q, nil); err != nil {
		return fmt.Errorf("node %d: %w", c.Node, err)
	}
	return nil
}

// StartHeartbeat sends a heartbeat every Options.Heartbeat until Leave or Fail. onFailure is
// called once, from another goroutine, when the group failed (a node was lost or reported an
// error) or when the coordinator stayed unreachable for Options.Lost (node 0 died).
func (c *Client) StartHeartbeat(onFailure func(error)) {
	c.beats.Add(1)
	go func() {
		defer c.beats.Done()
		t := time.NewTicker(c.opt.Heartbeat)
		defer t.Stop()
		lastOK := time.Now()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.opt.Heartbeat*2)
			_, err := c.do(ctx, http.MethodPost, "/v1/heartbeat", url.Values{"node": {strconv.Itoa(c.Node)}}, nil)
			cancel()
			var remote *remoteError
			switch {
			case err == nil:
				lastOK = time.Now()
			case errors.As(err, &remote):
				onFailure(err)
				return
			case time.Since(lastOK) > c.opt.Lost:
				onFailure(fmt.Errorf("%w: the coordinator (node 0) at %s has not answered for %s (node 0 died or is unreachable): %w",
					ErrGroupFailed, c.addr, c.opt.Lost, err))
				return
			}
		}
	}()
}

func (c *Client) stopHeartbeat() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.beats.Wait()
}

// Fail reports this node's error to the coordinator, which fails the group: every other node
// stops with it. It stops the heartbeat.
func (c *Client) Fail(cause error) {
	c.stopHeartbeat()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.do(ctx, http.MethodPost, "/v1/fail", url.Values{"node": {strconv.Itoa(c.Node)}}, []byte(cause.Error()))
}

// Leave tells the coordinator that this node ended normally and stops the heartbeat.
func (c *Client) Leave() {
	c.stopHeartbeat()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = c.do(ctx, http.MethodPost, "/v1/leave", url.Values{"node": {strconv.Itoa(c.Node)}}, nil)
}
