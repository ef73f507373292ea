package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

func jsonMarshal(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("remote: encoding the request: %w", err)
	}
	return js, nil
}

// UpdateWeights tells every server to load the Hugging Face directory dir as weight
// version. Servers load concurrently; one that fails is recorded and catches up before
// its next request. It fails only when no server loaded the weights.
func (c *Client) UpdateWeights(dir string, version int) error {
	c.mu.Lock()
	c.latestDir, c.latestVer = dir, version
	c.mu.Unlock()
	t := time.Now()
	errs := c.onEveryServer(func(s *server) error { return c.load(s, dir, version) })
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.updates++
	c.stats.updateTime += time.Since(t)
	ok := 0
	for i, err := range errs {
		if err == nil {
			ok++
			continue
		}
		c.events = append(c.events, Event{Type: "remote_update_failed", Server: c.servers[i].url, Version: version, Err: err.Error()})
	}
	c.events = append(c.events, Event{Type: "remote_update", Version: version, Seconds: time.Since(t).Seconds(),
		Attempt: ok})
	if ok == 0 {
		return fmt.Errorf("remote: no server loaded weight version %d: %w", version, errors.Join(errs...))
	}
	return nil
}

// load posts /update_weights_from_disk to s and records the version it acknowledged.
func (c *Client) load(s *server, dir string, version int) error {
	raw, err := c.post(s.url+"/update_weights_from_disk",
		updateRequest{ModelPath: dir, WeightVersion: strconv.Itoa(version), FlushCache: true}, c.cfg.UpdateTimeout)
	if err == nil {
		var a updateAnswer
		switch {
		case json.Unmarshal(raw, &a) != nil:
			err = fmt.Errorf("update answer is not JSON: %s", clip(raw))
		case a.Success != nil && !*a.Success:
			err = fmt.Errorf("update refused: %s", a.Message)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		s.failedAt = time.Now()
		s.failures++
		return fmt.Errorf("%s: %w", s.url, err)
	}
	s.version = version
	return nil
}

// catchUp loads the latest weights into s when it missed their update (it failed, or
// was down).
func (c *Client) catchUp(s *server) error {
	c.mu.Lock()
	dir, v, has := c.latestDir, c.latestVer, s.version
	c.mu.Unlock()
	if dir == "" || has >= v {
		return nil
	}
	if err := c.load(s, dir, v); err != nil {
		return fmt.Errorf("catching up to weight version %d: %w", v, err)
	}
	return nil
}

// TakeEvents returns the events since the last call.
func (c *Client) TakeEvents() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := c.events
	c.events = nil
	return ev
}

// Metrics returns the counters since the last call under remote/…, and per server
// remote/server<i>/… (i as in Config.Servers), then starts them afresh.
func (c *Client) Metrics() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	m := map[string]float64{"remote/requests": float64(st.requests), "remote/failures": float64(st.failures),
		"remote/retries": float64(st.retries), "remote/stale_refused": float64(st.stale),
		"remote/rows": float64(st.rows), "remote/tokens": float64(st.tokens)}
	if st.rows > 0 {
		m["remote/oldest_weight_version"] = float64(st.oldest)
	}
	if st.sleepTime > 0 || st.wakeTime > 0 {
		m["remote/sleep_s"], m["remote/wake_up_s"] = st.sleepTime.Seconds(), st.wakeTime.Seconds()
	}
	if st.updates > 0 {
		m["remote/update_s"] = st.updateTime.Seconds()
	}
	for i, s := range c.servers {
		p := "remote/server" + strconv.Itoa(i) + "/"
		m[p+"requests"] = float64(s.requests)
		m[p+"failures"] = float64(s.failures)
		m[p+"busy_s"] = s.busy.Seconds()
		m[p+"rows"] = float64(s.rows)
		m[p+"weight_version"] = float64(s.version)
		s.requests, s.failures, s.busy, s.rows, s.toks = 0, 0, 0, 0, 0
	}
	c.stats = stats{}
	return m
}

// Health checks that at least one server answers GET /health; it returns the servers
// that do not (for the run's events) and an error when none does.
func (c *Client) Health() (down []string, err error) {
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i, s := range c.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.get(s.url + "/health")
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != nil {
			down = append(down, fmt.Sprintf("%s: %v", c.servers[i].url, e))
		}
	}
	if len(down) == len(c.servers) {
		return down, fmt.Errorf("remote: no server is up: %w", errors.Join(errs...))
	}
	return down, nil
}

// onEveryServer calls f for every server concurrently and returns their errors, in the
// servers' order.
func (c *Client) onEveryServer(f func(s *server) error) []error {
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i, s := range c.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(s)
		}()
	}
	wg.Wait()
	return errs
}
