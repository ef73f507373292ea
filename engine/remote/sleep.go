package remote

import (
	"errors"
	"fmt"
	"time"
)

// Memory release around training (rollout.sleep_between): the servers free the memory of
// their weights and KV cache while the trainer trains on the same accelerators, and take it
// back before the next generation. SGLang: POST /release_memory_occupation and
// /resume_memory_occupation with {} (every tag); vLLM (engine "openai"): POST /sleep?level=1
// (the weights kept in host memory, the KV cache dropped) and POST /wake_up.

// Sleep asks every server to release its memory. A server that fails is recorded as a
// warning event and keeps its memory; Sleep returns their errors joined.
func (c *Client) Sleep() error {
	path := "/release_memory_occupation"
	if c.cfg.Engine == OpenAI {
		path = "/sleep?level=1"
	}
	return c.everyServer("remote_sleep", path, &c.stats.sleepTime)
}

// WakeUp asks every server to take its memory back. It fails only when no server did; one
// that failed answers its next requests with errors, and they are asked of the others.
func (c *Client) WakeUp() error {
	path := "/resume_memory_occupation"
	if c.cfg.Engine == OpenAI {
		path = "/wake_up"
	}
	err := c.everyServer("remote_wake_up", path, &c.stats.wakeTime)
	if err != nil && c.failedAll(err) {
		return fmt.Errorf("remote: no server woke up: %w", err)
	}
	return nil
}

// everyServer posts {} to path on every server concurrently (within the update timeout),
// records the failures as events of type typ, adds the time taken to *d and returns the
// failures joined.
func (c *Client) everyServer(typ, path string, d *time.Duration) error {
	t := time.Now()
	errs := c.onEveryServer(func(s *server) error {
		if _, err := c.post(s.url+path, struct{}{}, c.cfg.UpdateTimeout); err != nil {
			return fmt.Errorf("%s%s: %w", s.url, path, err)
		}
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	*d += time.Since(t)
	for i, err := range errs {
		if err != nil {
			c.servers[i].failedAt = time.Now()
			c.servers[i].failures++
			c.events = append(c.events, Event{Type: typ + "_failed", Server: c.servers[i].url, Err: err.Error()})
		}
	}
	return errors.Join(errs...)
}

// failedAll reports whether err, from everyServer, holds a failure of every server.
func (c *Client) failedAll(err error) bool {
	var j interface{ Unwrap() []error }
	return errors.As(err, &j) && len(j.Unwrap()) == len(c.servers)
}
