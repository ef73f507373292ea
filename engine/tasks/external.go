package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"stx.dev/stx/schema"

	"stx.dev/stx/internal/lineproc"
)

// External rewards. Two transports, both scoring whole batches:
//
// command (fn "command"): a long-lived process, started once when the run
// builds its reward and stopped by Reward.Close. stx writes one JSON object
// per line on its stdin for every completion of a batch,
//
//	{"request_id": 7, "prompt": "...", "completion": "...", "answer": "...",
//	 "metadata": <any>, "id": "...", "data_source": "..."}
//
// and reads one reply line per request from its stdout, which echoes the
// request's request_id (a number unique over the command's life; id is the
// example's own id, shared by the samples of a prompt):
//
//	{"request_id": 7, "reward": 0.5}      or      {"request_id": 7, "error": "why"}
//
// Replies are paired with requests by request_id, so they may come in any
// order; a line that is not one such JSON object (two values on a line,
// unknown fields, no request_id), or that answers a request that is not
// awaiting an answer (a start-up line, a second answer), stops the run
// naming the command: matching by order would shift every later reward
// silently. Requests are pipelined (all of a batch are written while
// replies are read), so the command may answer as it reads. Diagnostics go
// to stderr: stx keeps its last lines for error messages. Each reply must
// come within timeout seconds; after a timeout, a crash or a closed stdout
// stx restarts the command and sends the unanswered requests again (with
// new request_ids), at most retries times per request. An {"error"} reply
// or a protocol fault ends the run (they are not transient).
//
// http (fn "http"): OpenRLHF's remote reward-model convention. stx POSTs
// batch_size completions (0: the whole batch) as
//
//	{"query": [prompt+completion, ...], "prompts": [prompt, ...], "labels": [answer, ...]}
//
// with Content-Type application/json and expects {"rewards": [r, ...]}, one
// number per query (other keys are ignored). Network errors, timeouts, 429
// and 5xx answers are retried with exponential backoff (0.5 s, 1 s, 2 s, …,
// capped at 8 s); other statuses and malformed answers are errors at once.

// commandRequest is one line stx writes to a reward command.
type commandRequest struct {
	RequestID  uint64          `json:"request_id"`
	Prompt     string          `json:"prompt"`
	Completion string          `json:"completion"`
	Answer     string          `json:"answer"`
	Metadata   json.RawMessage `json:"metadata"`
	ID         string          `json:"id"`
	DataSource string          `json:"data_source"`
}

// commandReply is one line a reward command writes back.
type commandReply struct {
	RequestID *uint64  `json:"request_id"`
	Reward    *float64 `json:"reward"`
	Error     string   `json:"error"`
}

// commandScorer runs a reward command (see above).
type commandScorer struct {
	argv    []string
	timeout time.Duration
	retries int

	mu   sync.Mutex
	proc *lineproc.Proc // nil when not running
	next uint64         // the next request_id (from 1)
}

// maxReplyLine bounds one reply line of a reward command.
const maxReplyLine = 16 << 20

func newCommandScorer(term schema.Reward) (BatchScorer, error) {
	if len(term.Command) == 0 || term.Command[0] == "" {
		return nil, errors.New("needs a command (the program and its arguments)")
	}
	timeout, err := termTimeout(term)
	if err != nil {
		return nil, err
	}
	if term.Retries < 0 {
		return nil, fmt.Errorf("retries %d must be ≥ 0", term.Retries)
	}
	s := &commandScorer{argv: term.Command, timeout: timeout, retries: term.Retries, next: 1}
	// Start now: a missing program is a configuration error, found before
	// any rollout.
	if s.proc, err = s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func termTimeout(term schema.Reward) (time.Duration, error) {
	t := term.Timeout
	if t == 0 {
		t = 30
	}
	if !(t > 0) || math.IsInf(t, 0) || t > 1e6 {
		return 0, fmt.Errorf("timeout %g s must be > 0 and finite", term.Timeout)
	}
	return time.Duration(t * float64(time.Second)), nil
}

func (s *commandScorer) start() (*lineproc.Proc, error) {
	p, err := lineproc.Start(s.argv, "", maxReplyLine)
	if err != nil {
		return nil, fmt.Errorf("start reward command %w", err)
	}
	return p, nil
}

// stop kills the process and waits for it: its stderr is complete then.
func stop(p *lineproc.Proc) {
	p.Kill()
	for range p.Lines() { // drain so the reader can finish
	}
	<-p.Exited()
}

// errTransient marks failures worth a restart: a timeout or a crash.
type errTransient struct{ err error }

func (e errTransient) Error() string { return e.err.Error() }
func (e errTransient) Unwrap() error { return e.err }

func (s *commandScorer) ScoreBatch(completions []string, exs []Example) ([]float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]float64, len(completions))
	reqs := make([]commandRequest, len(completions))
	for i, c := range completions {
		meta := exs[i].Metadata
		if len(meta) == 0 {
			meta = json.RawMessage("null")
		}
		reqs[i] = commandRequest{Prompt: exs[i].Prompt, Completion: c, Answer: exs[i].Answer,
			Metadata: meta, ID: exs[i].ID, DataSource: exs[i].DataSource}
	}
	answered := make([]bool, len(reqs))
	left, attempt := len(reqs), 0
	for left > 0 {
		if s.proc == nil {
			p, err := s.start()
			if err != nil {
				return nil, err
			}
			s.proc = p
		}
		var pending []int
		for i, ok := range answered {
			if !ok {
				pending = append(pending, i)
			}
		}
		n, err := s.serve(reqs, pending, out, answered)
		if n > 0 {
			left, attempt = left-n, 0
		}
		if err == nil {
			continue
		}
		// Stopped first: its stderr is complete once it has been waited for.
		stop(s.proc)
		tail := s.proc.Stderr()
		s.proc = nil
		var tr errTransient
		transient := errors.As(err, &tr)
		if !transient || attempt >= s.retries {
			how := ""
			if transient {
				how = fmt.Sprintf(" (after %d retries)", attempt)
			}
			first := slices.Index(answered, false) + 1
			return nil, fmt.Errorf("command %q, request %d of %d%s: %w%s",
				s.argv[0], first, len(reqs), how, err, stderrNote(tail))
		}
		attempt++ // restart on the next turn
	}
	return out, nil
}

// serve sends the pending requests, each with a new request_id, and reads
// their replies into out (marking answered) in whatever order they come; it
// returns how many were answered before an error.
func (s *commandScorer) serve(reqs []commandRequest, pending []int, out []float64, answered []bool) (int, error) {
	p := s.proc
	waiting := make(map[uint64]int, len(pending)) // request_id → index
	lines := make([][]byte, len(pending))
	for k, i := range pending {
		r := reqs[i]
		r.RequestID = s.next
		s.next++
		waiting[r.RequestID] = i
		b, err := json.Marshal(r)
		if err != nil {
			return 0, fmt.Errorf("encode request %d: %w", i+1, err)
		}
		lines[k] = append(b, '\n')
	}
	go func() {
		// Write errors show up as a closed stdout on the reading side.
		for _, l := range lines {
			if _, err := p.Write(l); err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	done := 0
	for len(waiting) > 0 {
		timer.Reset(s.timeout)
		var line []byte
		for line == nil {
			select {
			case l, ok := <-p.Lines():
				if !ok {
					return done, closedStdout(p, timer)
				}
				if l.Err != nil {
					return done, l.Err
				}
				if len(bytes.TrimSpace(l.Data)) > 0 { // blank lines are not replies
					line = l.Data
				}
			case <-timer.C:
				return done, errTransient{fmt.Errorf("no reply within %s", s.timeout)}
			}
		}
		rep, err := parseReply(line)
		if err != nil {
			return done, err
		}
		i, ok := waiting[*rep.RequestID]
		if !ok {
			return done, fmt.Errorf("reply %q answers request_id %d, which is not awaiting an answer (an unrequested line, or a second answer)",
				lineproc.Clip(line, 200), *rep.RequestID)
		}
		if rep.Error != "" {
			return done, fmt.Errorf("command reported: %s", rep.Error)
		}
		delete(waiting, *rep.RequestID)
		out[i], answered[i] = *rep.Reward, true
		done++
	}
	return done, nil
}

// parseReply reads one reply line: exactly one JSON object with a
// request_id and a reward or an error.
func parseReply(line []byte) (commandReply, error) {
	var rep commandReply
	bad := func(why string) error {
		return fmt.Errorf(`reply %q is not {"request_id": n, "reward": number} or {"request_id": n, "error": text}: %s`, lineproc.Clip(line, 200), why)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return rep, bad(err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return rep, bad("the line holds more than one JSON value")
	}
	if rep.RequestID == nil {
		return rep, bad("it has no request_id")
	}
	if rep.Reward == nil && rep.Error == "" {
		return rep, bad(`it has no "reward"`)
	}
	return rep, nil
}

// closedStdout is the error of a command whose stdout ended: it exited, or
// it closed its stdout and went on running, which would leave stx waiting
// for ever; it is given until the reply timeout to exit, then killed.
func closedStdout(p *lineproc.Proc, timer *time.Timer) error {
	select {
	case <-p.Exited():
		how := "exited"
		if err := p.WaitErr(); err != nil {
			how = err.Error()
		}
		return errTransient{fmt.Errorf("command stopped before replying (%s)", how)}
	case <-timer.C:
		p.Kill()
		<-p.Exited()
		return errTransient{errors.New("command closed its stdout but kept running (killed)")}
	}
}

// Close ends the command: EOF on its stdin, then a kill if it has not
// exited within two seconds.
func (s *commandScorer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	p.Close(2 * time.Second)
	return nil
}

// stderrNote formats the last lines of a command's stderr for an error.
func stderrNote(tail string) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return ""
	}
	lines := strings.Split(tail, "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "\nstderr of the command (last lines):\n\t" + strings.Join(lines, "\n\t")
}

// httpScorer posts batches to a remote reward model (see above).
type httpScorer struct {
	url       string
	client    *http.Client
	retries   int
	batchSize int
	backoff   time.Duration // first retry delay; doubled per retry, capped at 8 s
}

func newHTTPScorer(term schema.Reward) (BatchScorer, error) {
	if !strings.HasPrefix(term.URL, "http://") && !strings.HasPrefix(term.URL, "https://") {
		return nil, fmt.Errorf("url %q must start with http:// or https://", term.URL)
	}
	timeout, err := termTimeout(term)
	if err != nil {
		return nil, err
	}
	if term.Retries < 0 || term.BatchSize < 0 {
		return nil, fmt.Errorf("retries %d and batch_size %d must be ≥ 0", term.Retries, term.BatchSize)
	}
	return &httpScorer{url: term.URL, client: &http.Client{Timeout: timeout}, retries: term.Retries,
		batchSize: term.BatchSize, backoff: 500 * time.Millisecond}, nil
}

// remoteRequest is OpenRLHF's remote reward-model request body.
type remoteRequest struct {
	Query   []string `json:"query"`
	Prompts []string `json:"prompts"`
	Labels  []string `json:"labels"`
}

func (s *httpScorer) ScoreBatch(completions []string, exs []Example) ([]float64, error) {
	out := make([]float64, 0, len(completions))
	size := s.batchSize
	if size == 0 {
		size = max(len(completions), 1)
	}
	for lo := 0; lo < len(completions); lo += size {
		hi := min(lo+size, len(completions))
		req := remoteRequest{}
		for i := lo; i < hi; i++ {
			req.Query = append(req.Query, exs[i].Prompt+completions[i])
			req.Prompts = append(req.Prompts, exs[i].Prompt)
			req.Labels = append(req.Labels, exs[i].Answer)
		}
		rs, err := s.post(req)
		if err != nil {
			return nil, fmt.Errorf("POST %s (completions %d–%d of %d): %w", s.url, lo+1, hi, len(completions), err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// post sends one request, retrying transient failures.
func (s *httpScorer) post(req remoteRequest) ([]float64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	delay := s.backoff
	for attempt := 0; ; attempt++ {
		rs, err := s.postOnce(body, len(req.Query))
		if err == nil {
			return rs, nil
		}
		var tr errTransient
		if !errors.As(err, &tr) {
			return nil, err
		}
		if attempt >= s.retries {
			return nil, fmt.Errorf("%w (after %d retries)", err, attempt)
		}
		time.Sleep(delay)
		delay = min(2*delay, 8*time.Second)
	}
}

func (s *httpScorer) postOnce(body []byte, n int) ([]float64, error) {
	resp, err := s.client.Post(s.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, errTransient{err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, errTransient{fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("status %s: %s", resp.Status, lineproc.Clip(bytes.TrimSpace(data), 300))
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return nil, errTransient{err}
		}
		return nil, err
	}
	var ans map[string]json.RawMessage
	if err := json.Unmarshal(data, &ans); err != nil {
		return nil, fmt.Errorf("answer %q is not a JSON object: %v", lineproc.Clip(data, 300), err)
	}
	raw, ok := ans["rewards"]
	if !ok {
		keys := make([]string, 0, len(ans))
		for k := range ans {
			keys = append(keys, k)
		}
		return nil, fmt.Errorf(`answer has no "rewards" (keys: %s)`, strings.Join(keys, ", "))
	}
	var rs []float64
	if err := json.Unmarshal(raw, &rs); err != nil {
		return nil, fmt.Errorf(`"rewards" is not a list of numbers: %v`, err)
	}
	if len(rs) != n {
		return nil, fmt.Errorf(`"rewards" has %d values for %d queries`, len(rs), n)
	}
	return rs, nil
}

func (s *httpScorer) Close() error {
	s.client.CloseIdleConnections()
	return nil
}
