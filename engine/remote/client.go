// Package remote is stx's client of inference servers for rollouts: SGLang's native API
// (/generate, /update_weights_from_disk) or the OpenAI /v1/completions API (vLLM, SGLang,
// stx serve). It completes token prompts as the in-process sampler does: a batch is sent
// whole to one server, or cut into shards of rows spread over the servers; rows keep their
// order; a server that fails, hangs past the request timeout or answers something that is
// not a valid completion is skipped and the shard is asked of the next one, a bounded
// number of times. Answers carry the weight version they were sampled with; one older than
// the oldest allowed version is refused like a failure.
package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"stx.dev/stx/runtime"
)

// Engines are the protocols the client speaks.
const (
	SGLang = "sglang"
	OpenAI = "openai"
)

// Config configures a Client.
type Config struct {
	Engine  string   // SGLang or OpenAI
	Servers []string // base URLs, e.g. http://10.0.0.5:30000
	// Model is the OpenAI request's "model" field ("" leaves it out).
	Model string
	// Timeout bounds one generation request (0: 2 minutes); UpdateTimeout one weight load
	// (0: 10 minutes).
	Timeout, UpdateTimeout time.Duration
	// Attempts bounds the servers one shard is asked of before Generate fails (0: twice
	// the number of servers).
	Attempts int
	// ShardRows cuts a batch into requests of at most this many rows spread over the
	// servers; 0 sends each batch whole to one server (in turn), which a deterministic
	// server (stx serve) samples exactly as the in-process sampler does for the same seed.
	ShardRows int
	// Vocab bounds the token ids of an answer: [0, Vocab).
	Vocab int
	// HTTP is the client to use (nil: a new one).
	HTTP *http.Client
}

// Event is something the run should record: a failed request that was retried, a refused
// stale answer, a weight update.
type Event struct {
	Type    string // "remote_retry", "remote_update", "remote_update_failed"
	Server  string
	Attempt int
	Version int
	Seconds float64
	Err     string
}

// Client is a pool of servers. Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	servers []*server
	rr      atomic.Uint64 // the next batch's first server

	mu         sync.Mutex
	minVersion int    // oldest weight version an answer may carry; -1: any
	latestDir  string // the weights of latestVer, for a server that missed an update
	latestVer  int
	events     []Event
	stats      stats
}

// server is one inference server and what the client knows of it.
type server struct {
	url string
	// The fields below are guarded by Client.mu.
	version    int       // the last weight version it acknowledged (-1: none)
	failedAt   time.Time // its last failure (zero: none): tried last for a while
	requests   int
	failures   int
	busy       time.Duration
	rows, toks int
}

// stats are the client's counters since the last Metrics call.
type stats struct {
	requests, failures, stale, retries int
	rows, tokens                       int
	// oldest is the oldest weight version of an answer taken (valid when rows > 0).
	oldest     int
	updates    int
	updateTime time.Duration
	// sleepTime and wakeTime are the time spent releasing and taking back the servers'
	// memory (sleep.go).
	sleepTime, wakeTime time.Duration
}

// New checks cfg and returns a client; it contacts no server.
func New(cfg Config) (*Client, error) {
	if cfg.Engine != SGLang && cfg.Engine != OpenAI {
		return nil, fmt.Errorf("rollout engine %q: want %q or %q", cfg.Engine, SGLang, OpenAI)
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("rollout engine: no servers")
	}
	if cfg.Vocab <= 0 {
		return nil, fmt.Errorf("rollout engine: vocabulary size %d", cfg.Vocab)
	}
	c := &Client{cfg: cfg, minVersion: -1, latestVer: -1}
	for _, s := range cfg.Servers {
		if err := CheckURL(s); err != nil {
			return nil, err
		}
		c.servers = append(c.servers, &server{url: strings.TrimRight(s, "/"), version: -1})
	}
	if c.cfg.Timeout <= 0 {
		c.cfg.Timeout = 2 * time.Minute
	}
	if c.cfg.UpdateTimeout <= 0 {
		c.cfg.UpdateTimeout = 10 * time.Minute
	}
	if c.cfg.Attempts <= 0 {
		c.cfg.Attempts = 2 * len(c.servers)
	}
	if c.cfg.HTTP == nil {
		c.cfg.HTTP = &http.Client{}
	}
	return c, nil
}

// CheckURL reports a server URL that is not an absolute http(s) URL with a host.
func CheckURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("server %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("server %q: want an http:// or https:// URL with a host", s)
	}
	return nil
}

// SetMinVersion sets the oldest weight version an answer may carry (-1: any): with
// max_staleness k, the trainer's version minus k.
func (c *Client) SetMinVersion(v int) {
	c.mu.Lock()
	c.minVersion = v
	c.mu.Unlock()
}

// Generate completes prompts (row i answers prompts[i]) with o's sampling settings. A
// batch sent whole carries o.Seed; shard i of a cut batch a seed derived from o.Seed and i.
func (c *Client) Generate(prompts [][]int32, o runtime.SampleOptions) ([]runtime.Sample, error) {
	if len(prompts) == 0 {
		return nil, nil
	}
	if o.MaxNewTokens <= 0 {
		return nil, fmt.Errorf("remote: max_new_tokens %d", o.MaxNewTokens)
	}
	per := c.cfg.ShardRows
	if per <= 0 || per > len(prompts) {
		per = len(prompts)
	}
	nShards := (len(prompts) + per - 1) / per
	first := int(c.rr.Add(uint64(nShards)) - uint64(nShards))
	out := make([]runtime.Sample, len(prompts))
	errs := make([]error, nShards)
	var wg sync.WaitGroup
	for i := range nShards {
		lo, hi := i*per, min((i+1)*per, len(prompts))
		seed := o.Seed
		if nShards > 1 {
			seed = shardSeed(o.Seed, i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.shard(prompts[lo:hi], o, seed, first+i, out[lo:hi])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// shardSeed is shard i's seed: distinct per shard, fixed by the batch's seed.
func shardSeed(seed uint64, i int) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	h.Write(b[:])
	return h.Sum64()
}

// shard asks servers in turn, from the first'th, for the completions of prompts until
// one gives a valid answer or the attempts are spent.
func (c *Client) shard(prompts [][]int32, o runtime.SampleOptions, seed uint64, first int, dst []runtime.Sample) error {
	var errs []error
	tried := map[*server]bool{}
	for a := range c.cfg.Attempts {
		s := c.pick(first, tried)
		got, err := c.ask(s, prompts, o, seed)
		if err == nil {
			copy(dst, got)
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.url, err))
		c.mu.Lock()
		c.stats.retries++
		c.events = append(c.events, Event{Type: "remote_retry", Server: s.url, Attempt: a + 1, Err: err.Error()})
		c.mu.Unlock()
	}
	return fmt.Errorf("remote: %d rows: no valid answer in %d attempts: %w", len(prompts), c.cfg.Attempts, errors.Join(errs...))
}

// cooldown is how long a failed server goes to the back of the queue.
const cooldown = 30 * time.Second

// pick is the next server for a shard that starts at server first and has tried those in
// tried: servers in turn from first, those that failed within the cooldown after the
// others, skipping the tried ones (all again once every server was tried). It marks the
// one it returns as tried.
func (c *Client) pick(first int, tried map[*server]bool) *server {
	n := len(c.servers)
	if len(tried) == n {
		clear(tried)
	}
	var order []*server
	for i := range n {
		if s := c.servers[(first+i)%n]; !tried[s] {
			order = append(order, s)
		}
	}
	c.mu.Lock()
	now := time.Now()
	down := func(s *server) bool { return !s.failedAt.IsZero() && now.Sub(s.failedAt) < cooldown }
	slices.SortStableFunc(order, func(x, y *server) int {
		switch xd, yd := down(x), down(y); {
		case xd == yd:
			return 0
		case xd:
			return 1
		}
		return -1
	})
	c.mu.Unlock()
	tried[order[0]] = true
	return order[0]
}

// errStale marks an answer sampled with weights older than allowed.
var errStale = errors.New("stale weights")

// ask sends one request to s and validates its answer.
func (c *Client) ask(s *server, prompts [][]int32, o runtime.SampleOptions, seed uint64) ([]runtime.Sample, error) {
	if err := c.catchUp(s); err != nil {
		return nil, err
	}
	t := time.Now()
	var path string
	var body any
	if c.cfg.Engine == SGLang {
		path, body = "/generate", sglangBody(prompts, o, seed)
	} else {
		path, body = "/v1/completions", openaiBody(c.cfg.Model, prompts, o, seed)
	}
	raw, err := c.post(s.url+path, body, c.cfg.Timeout)
	var samples []runtime.Sample
	oldest := -1
	if err == nil {
		samples, oldest, err = c.decode(s, raw, len(prompts), o)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.requests++
	s.busy += time.Since(t)
	c.stats.requests++
	if err != nil {
		s.failures++
		s.failedAt = time.Now()
		c.stats.failures++
		if errors.Is(err, errStale) {
			c.stats.stale++
		}
		return nil, err
	}
	s.failedAt = time.Time{}
	if c.stats.rows == 0 || oldest < c.stats.oldest {
		c.stats.oldest = oldest
	}
	s.rows += len(samples)
	c.stats.rows += len(samples)
	for _, smp := range samples {
		s.toks += len(smp.Tokens)
		c.stats.tokens += len(smp.Tokens)
	}
	return samples, nil
}

// decode parses and validates an answer of rows completions; it returns them with the
// oldest weight version they carry.
func (c *Client) decode(s *server, raw []byte, rows int, o runtime.SampleOptions) ([]runtime.Sample, int, error) {
	var ans []answer
	var err error
	if c.cfg.Engine == SGLang {
		ans, err = parseSGLang(raw)
	} else {
		ans, err = parseOpenAI(raw, rows)
	}
	if err != nil {
		return nil, 0, err
	}
	if len(ans) != rows {
		return nil, 0, fmt.Errorf("%d completions for %d prompts", len(ans), rows)
	}
	c.mu.Lock()
	minV, acked := c.minVersion, s.version
	c.mu.Unlock()
	out := make([]runtime.Sample, rows)
	oldest := -1
	for i, a := range ans {
		if a.version < 0 {
			a.version = acked // a server that does not say samples with what it last loaded
		}
		if minV >= 0 && a.version < minV {
			return nil, 0, fmt.Errorf("completion %d: %w: version %d, the oldest allowed is %d", i, errStale, a.version, minV)
		}
		if out[i], err = a.sample(o, c.cfg.Vocab); err != nil {
			return nil, 0, fmt.Errorf("completion %d: %w", i, err)
		}
		if i == 0 || a.version < oldest {
			oldest = a.version
		}
	}
	return out, oldest, nil
}

// answer is one completion as a server gave it.
type answer struct {
	tokens   []int32
	logProbs []float64
	finish   string
	version  int // -1: not said
}

// sample checks a and turns it into the sampler's type: token ids in [0, vocab), one
// finite log-prob ≤ 0 per token, at least one and at most max_new_tokens tokens, ending
// with a stop token or at max_new_tokens. Stopped is set as the in-process sampler sets it
// (the last token is in the stop set), whatever finish_reason says.
func (a answer) sample(o runtime.SampleOptions, vocab int) (runtime.Sample, error) {
	n := len(a.tokens)
	if n == 0 || n > o.MaxNewTokens {
		return runtime.Sample{}, fmt.Errorf("%d tokens, want 1 to max_new_tokens %d", n, o.MaxNewTokens)
	}
	if len(a.logProbs) != n {
		return runtime.Sample{}, fmt.Errorf("%d log-probs for %d tokens", len(a.logProbs), n)
	}
	smp := runtime.Sample{Tokens: a.tokens, LogProbs: make([]float32, n)}
	for j, id := range a.tokens {
		if id < 0 || int(id) >= vocab {
			return runtime.Sample{}, fmt.Errorf("token %d is id %d, outside the vocabulary [0, %d)", j, id, vocab)
		}
		lp := a.logProbs[j]
		// A log-prob is ≤ 0; a little above 0 is rounding of a probability of 1.
		if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 1e-3 {
			return runtime.Sample{}, fmt.Errorf("token %d has log-prob %g", j, lp)
		}
		smp.LogProbs[j] = float32(min(lp, 0))
	}
	if a.finish == "abort" || a.finish == "error" {
		return runtime.Sample{}, fmt.Errorf("finish_reason %q", a.finish)
	}
	if len(o.StopTokens) > 0 {
		smp.Stopped = slices.Contains(o.StopTokens, a.tokens[n-1])
		for _, id := range a.tokens[:n-1] {
			if slices.Contains(o.StopTokens, id) {
				return runtime.Sample{}, fmt.Errorf("stop token %d inside the completion", id)
			}
		}
		if !smp.Stopped && n < o.MaxNewTokens {
			return runtime.Sample{}, fmt.Errorf("ended after %d tokens with neither a stop token nor max_new_tokens %d (finish_reason %q)", n, o.MaxNewTokens, a.finish)
		}
	} else {
		smp.Stopped = a.finish == "stop"
	}
	return smp, nil
}

// maxAnswer bounds the bytes read of one answer.
const maxAnswer = 1 << 30

// post sends body as JSON and returns the answer's body; an HTTP status other than 200 is
// an error that quotes the start of the body.
func (c *Client) post(u string, body any, timeout time.Duration) ([]byte, error) {
	js, err := jsonMarshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(js))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer within %s", timeout)
		}
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("answer not complete within %s", timeout)
		}
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, clip(raw))
	}
	return raw, nil
}

// clip is the start of a body for an error message.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// get checks that u answers 200 within the request timeout.
func (c *Client) get(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.Timeout, 30*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, clip(raw))
	}
	return nil
}
