package serve

import (
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"

	"stx.dev/stx/runtime"
)

// Memory release between rollouts, as vLLM's sleep mode (POST /sleep?level=1|2, POST
// /wake_up, GET /is_sleeping) and SGLang's POST /release_memory_occupation and
// /resume_memory_occupation ({"tags": ["weights", "kv_cache"]}) offer it to RL trainers that
// train on the GPUs the server samples on. Asleep, the server drops its engine (the sampler's
// and scorer's compiled graphs and decoding buffers, the batcher) and, unless told to keep
// them, the weights; generation requests get HTTP 503 until it wakes up, which builds the
// engine again on the kept weights, or on the weights reloaded from where they came from
// (the model given at start, or the directory of the last /update_weights_from_disk). A weight
// update while asleep only checks the directory's config and records it: waking up loads it.

// errAsleep answers generation requests while the server sleeps (HTTP 503).
var errAsleep = errors.New("the server is asleep (its memory is released): POST /wake_up or /resume_memory_occupation first")

// Sleeping reports whether the server's memory is released.
func (s *Server) Sleeping() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.asleep
}

// Sleep releases the engine once the requests in flight end, and the weights too unless
// keepWeights is set (vLLM's level 1, SGLang's "kv_cache" tag alone). Asleep already, it
// releases the weights it kept if keepWeights is not set. The weights can be released only
// when they can be reloaded.
func (s *Server) Sleep(keepWeights bool) error {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	if !keepWeights && s.source == nil {
		return badRequest("the weights being served cannot be reloaded (no source to read them from): release the KV cache only (vLLM level 1, SGLang tags [\"kv_cache\"])")
	}
	s.mu.Lock() // waits for the requests in flight
	if s.closed {
		s.mu.Unlock()
		return errors.New("the server is shutting down")
	}
	var eng *engine
	if !s.asleep {
		eng, s.eng, s.asleep = s.eng, nil, true
		s.kept = eng.model
	}
	if !keepWeights {
		s.kept = nil
	}
	s.mu.Unlock()
	if eng != nil {
		eng.close()
	}
	// Return the freed memory to the system now, for the trainer that needs it.
	debug.FreeOSMemory()
	fmt.Fprintf(s.log, "stx serve: asleep (weights %s)\n", map[bool]string{true: "kept", false: "released"}[keepWeights])
	return nil
}

// WakeUp builds the engine again, on the kept weights or on the weights reloaded from their
// source; awake already, it does nothing.
func (s *Server) WakeUp() error {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	s.mu.RLock()
	asleep, m := s.asleep, s.kept
	s.mu.RUnlock()
	if !asleep {
		return nil
	}
	if m == nil {
		var err error
		if m, err = s.source(); err != nil {
			return fmt.Errorf("waking up: reloading the weights: %w", err)
		}
		if err := sameArchitecture(s.cfg, m.Config); err != nil {
			return fmt.Errorf("waking up: %w", err)
		}
	}
	eng, err := s.newEngine(m)
	if err != nil {
		return fmt.Errorf("waking up: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		eng.close()
		return errors.New("the server is shutting down")
	}
	s.eng, s.asleep, s.kept = eng, false, nil
	s.mu.Unlock()
	fmt.Fprintf(s.log, "stx serve: awake\n")
	return nil
}

// updateAsleep is UpdateWeights while the server sleeps: dir's config is checked and dir
// becomes the weights' source, which waking up loads.
func (s *Server) updateAsleep(dir, version string) (string, error) {
	cfg, err := runtime.ReadHFConfig(dir)
	if err != nil {
		return "", err
	}
	if err := sameArchitecture(s.cfg, cfg); err != nil {
		return "", fmt.Errorf("%s: %w; the served model is kept", dir, err)
	}
	s.mu.Lock()
	s.source = func() (*runtime.Model, error) { return runtime.LoadModel(dir) }
	s.kept = nil
	version = s.nextVersion(version)
	s.mu.Unlock()
	fmt.Fprintf(s.log, "stx serve: weights from %s (loaded when awake), weight version %s\n", dir, version)
	return version, nil
}

// nextVersion sets the weight version after an update (see UpdateWeights) and returns it;
// the caller holds s.mu.
func (s *Server) nextVersion(version string) string {
	switch n, err := strconv.ParseUint(s.version, 10, 63); {
	case version != "":
		s.version = version
	case err == nil:
		s.version = strconv.FormatUint(n+1, 10)
	}
	return s.version
}

// sleepRoutes are vLLM's and SGLang's endpoints of memory release.
func (s *Server) sleepRoutes(mux *http.ServeMux) {
	// vLLM: POST /sleep?level=1 (default) keeps the weights, level=2 releases them too; both
	// answer 200 with an empty body, as /wake_up does.
	mux.HandleFunc("POST /sleep", func(w http.ResponseWriter, r *http.Request) {
		level := 1
		if q := r.URL.Query().Get("level"); q != "" {
			n, err := strconv.Atoi(q)
			if err != nil || n < 1 || n > 2 {
				writeOpenAIError(w, badRequest("level %q: want 1 (keep the weights) or 2 (release them)", q))
				return
			}
			level = n
		}
		if err := s.Sleep(level == 1); err != nil {
			writeOpenAIError(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	// vLLM's tags (weights, kv_cache) wake parts of the engine; stx wakes it whole.
	mux.HandleFunc("POST /wake_up", func(w http.ResponseWriter, r *http.Request) {
		for _, t := range r.URL.Query()["tags"] {
			if t != "weights" && t != "kv_cache" {
				writeOpenAIError(w, badRequest("tag %q: want weights or kv_cache", t))
				return
			}
		}
		if err := s.WakeUp(); err != nil {
			writeOpenAIError(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /is_sleeping", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": s.Sleeping()})
	})
	// SGLang: {"tags": [...]} (absent or null: all of them); 200 with a null body.
	release := func(w http.ResponseWriter, r *http.Request) {
		tags, err := readTags(r)
		if err != nil {
			writeSGLangError(w, err)
			return
		}
		wake := r.URL.Path == "/resume_memory_occupation"
		if wake {
			err = s.WakeUp()
		} else {
			err = s.Sleep(tags != nil && !slices.Contains(tags, "weights"))
		}
		if err != nil {
			writeSGLangError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nil)
	}
	for _, p := range []string{"/release_memory_occupation", "/resume_memory_occupation"} {
		mux.HandleFunc("GET "+p, release)
		mux.HandleFunc("POST "+p, release)
	}
}

// readTags reads SGLang's {"tags": [...]} (an empty body or null tags: nil, every tag).
func readTags(r *http.Request) ([]string, error) {
	var q struct {
		Tags []string `json:"tags"`
	}
	if r.ContentLength != 0 && r.Method == http.MethodPost {
		if err := readJSON(r, &q); err != nil {
			return nil, err
		}
	}
	for _, t := range q.Tags {
		if t != "weights" && t != "kv_cache" && t != "cuda_graph" {
			return nil, badRequest("tag %q: want weights, kv_cache or cuda_graph", t)
		}
	}
	return q.Tags, nil
}
