// Package serve is an HTTP server on stx's sampler that speaks the inference APIs RL trainers
// use: SGLang's native /generate, /update_weights_from_disk, /get_model_info, /health and
// /flush_cache (sglang.go), and the OpenAI /v1/completions and /v1/chat/completions as vLLM
// serves them (openai.go). docs/serve.md lists the request and response shapes.
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/chat"
	"stx.dev/stx/runtime/tokenizer"
)

// Options configures a Server.
type Options struct {
	Backend backends.Backend
	Model   *runtime.Model
	// ModelPath names the model in /get_model_info and /v1/models: its directory or built-in name.
	ModelPath string
	// Tokenizer decodes completions and encodes text prompts; nil: token ids only.
	Tokenizer tokenizer.Tokenizer
	// TokenizerPath is reported by /get_model_info.
	TokenizerPath string
	// Template renders /v1/chat/completions messages; nil: chat is refused.
	Template *chat.Template
	// StopTokens end a sample unless a request sets ignore_eos: the tokenizer's stop set
	// (EOS and generation_config.json's eos_token_id), or the config's EOS.
	StopTokens []int32
	// MaxBatch bounds the rows decoded together (≥ 1).
	MaxBatch int
	// WeightVersion is the version of the starting weights ("0" when empty).
	WeightVersion string
	// Log receives warnings (ignored fields) and weight updates; nil: discarded.
	Log io.Writer
	// Reload loads the starting weights again, for a server woken up after releasing them
	// (sleep.go); nil: they cannot be released before a weight update.
	Reload func() (*runtime.Model, error)
}

// Server answers the HTTP APIs. Requests hold the weights' read lock while they generate, so a
// weight update (write lock) waits for the requests in flight and runs before later ones.
type Server struct {
	opt Options // opt.Model is cleared once served: the engine holds the weights
	cfg runtime.Config
	log io.Writer

	mu      sync.RWMutex // guards the fields below
	eng     *engine      // nil while asleep or once closed
	version string
	closed  bool
	// Memory release (sleep.go): asleep, the engine is released; kept is the model when its
	// weights were kept, source reloads the weights being served.
	asleep bool
	kept   *runtime.Model
	source func() (*runtime.Model, error)

	updateMu sync.Mutex  // one weight update at a time
	closing  atomic.Bool // shutting down: /health answers 503
}

// engine is one set of weights with the generator that samples from them.
type engine struct {
	model *runtime.Model
	gen   generator
	// sampler decodes seeded batches in one call (oneSeededBatch), as stx run's own sampler.
	sampler *runtime.Sampler
	scorer  *runtime.Scorer // prompt log-probs (SGLang's logprob_start_len, vLLM's prompt_logprobs)
	logits  logitsExec      // top-N log-probs (toplogprobs.go), compiled on first use
	close   func()
}

// New starts a server on opt.Model.
func New(opt Options) (*Server, error) {
	if opt.Model == nil || opt.Backend == nil {
		return nil, errors.New("serve: a model and a backend are required")
	}
	if opt.MaxBatch < 1 {
		return nil, fmt.Errorf("serve: max batch must be at least 1, got %d", opt.MaxBatch)
	}
	if opt.WeightVersion == "" {
		opt.WeightVersion = "0"
	}
	s := &Server{opt: opt, cfg: opt.Model.Config, log: opt.Log, version: opt.WeightVersion, source: opt.Reload}
	if s.log == nil {
		s.log = io.Discard
	}
	eng, err := s.newEngine(opt.Model)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	// Only the engine keeps the model, so the weights a weight update replaces can be freed.
	s.opt.Model = nil
	return s, nil
}

func (s *Server) newEngine(m *runtime.Model) (*engine, error) {
	sm, err := runtime.NewSampler(s.opt.Backend, m)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	sc, err := runtime.NewScorer(s.opt.Backend, m)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	gen, closeGen := newGenerator(sm, s.opt.MaxBatch)
	return &engine{model: m, gen: gen, sampler: sm, scorer: sc, close: closeGen}, nil
}

// Close stops the generator; requests still running fail.
func (s *Server) Close() {
	s.closing.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.kept = true, nil
	if s.eng != nil {
		s.eng.close()
		s.eng = nil
	}
}

// SetClosing makes /health answer 503, for the time between a shutdown signal and the end of
// the requests in flight.
func (s *Server) SetClosing() { s.closing.Store(true) }

// WeightVersion is the version of the weights now serving.
func (s *Server) WeightVersion() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.version
}

// Handler routes the SGLang and OpenAI endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.sglangRoutes(mux)
	s.openaiRoutes(mux)
	s.sleepRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, openaiError{Error: openaiErrorInfo{
			Message: fmt.Sprintf("%s %s: no such endpoint", r.Method, r.URL.Path), Type: "NotFoundError", Code: http.StatusNotFound}})
	})
	return mux
}

// acquire returns the engine and weight version for one request, holding the read lock until
// release is called.
func (s *Server) acquire() (eng *engine, version string, release func(), err error) {
	s.mu.RLock()
	if s.eng == nil {
		asleep := s.asleep && !s.closed
		s.mu.RUnlock()
		if asleep {
			return nil, "", nil, errAsleep
		}
		return nil, "", nil, errors.New("the server is shutting down")
	}
	return s.eng, s.version, s.mu.RUnlock, nil
}

// requestError is a client mistake: HTTP 400 in the API's error shape.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{fmt.Sprintf(format, args...)}
}

// statusOf is 400 for a client mistake, 499 when the client went away, 503 while asleep,
// else 500.
func statusOf(err error) int {
	var re *requestError
	switch {
	case errors.As(err, &re):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		return 499
	case errors.Is(err, errAsleep):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// maxBody bounds a request body (long prompts as token-id lists stay well inside it).
const maxBody = 64 << 20

// readJSON decodes the request body into v (a struct or a map); a body that is not JSON of
// that shape is a request error.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if len(body) > maxBody {
		return badRequest("the request body is larger than %d bytes", maxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest("field %q: JSON %s where %s is expected", te.Field, te.Value, te.Type)
		}
		return badRequest("the request body is not valid JSON: %v", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may have gone; nothing to do then
}
