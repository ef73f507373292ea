package runtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
)

// batcherCase is one request of the batcher tests: its prompt and options.
type batcherCase struct {
	prompt []int32
	opt    SampleOptions
}

// batcherCases returns n requests with varied prompts (some repeated) and options: sampling
// with and without top-k/top-p truncation, greedy, stop tokens, different lengths and seeds.
func batcherCases(vocab, n int) []batcherCase {
	rng := rand.New(rand.NewPCG(11, 11))
	opts := []SampleOptions{
		{MaxNewTokens: 24, Temperature: 1},
		{MaxNewTokens: 9, Temperature: 0.7, TopP: 0.9, TopK: 20, StopTokens: []int32{3, 7}},
		{MaxNewTokens: 17},
		{MaxNewTokens: 30, Temperature: 1.3, TopK: 5, StopTokens: []int32{1}},
	}
	var out []batcherCase
	for i := range n {
		prompt := randomSeqs(rng, vocab, 1+rng.IntN(20))[0]
		if i%5 == 4 {
			prompt = out[i-1].prompt // the same prompt as another request, with other options
		}
		opt := opts[i%len(opts)]
		opt.Seed = uint64(100 + i)
		out = append(out, batcherCase{prompt, opt})
	}
	return out
}

// aloneSamples is each case's sample from Sampler.Generate with its prompt alone.
func aloneSamples(t *testing.T, s *Sampler, cases []batcherCase) []Sample {
	t.Helper()
	want := make([]Sample, len(cases))
	for i, c := range cases {
		out, err := s.Generate([][]int32{c.prompt}, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = out[0]
	}
	return want
}

// TestBatcherMatchesGenerateAlone: a request through the batcher, alone or overlapping in time
// with others (more of them than rows, so that requests wait and take freed rows), gives the
// sample Sampler.Generate gives its prompt alone with the same options and seed.
func TestBatcherMatchesGenerateAlone(t *testing.T) {
	for _, name := range []string{"gqa-bias-tied", "bench"} {
		t.Run(name, func(t *testing.T) {
			cfg := smallGQA()
			if name == "bench" {
				cfg, _ = BuiltinConfig("bench")
				cfg.InitStd = 0.05
			}
			m, err := NewModel(cfg, 7)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSampler(testBackend(t), m)
			if err != nil {
				t.Fatal(err)
			}
			cases := batcherCases(cfg.VocabSize, 14)
			want := aloneSamples(t, s, cases)
			b := NewBatcher(s, 4)
			defer b.Close()
			ctx := context.Background()
			for i, c := range cases[:3] { // one at a time
				got, err := b.Generate(ctx, c.prompt, c.opt)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want[i]) {
					t.Fatalf("request %d alone through the batcher: %v, Generate alone %v", i, got, want[i])
				}
			}
			got := make([]Sample, len(cases))
			errs := make([]error, len(cases))
			var wg sync.WaitGroup
			for i, c := range cases {
				wg.Go(func() { got[i], errs[i] = b.Generate(ctx, c.prompt, c.opt) })
			}
			// A Generate call of its own interleaves with the batch steps.
			if _, err := s.Generate([][]int32{cases[0].prompt, cases[1].prompt}, cases[0].opt); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i := range cases {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("request %d overlapping others: %v, Generate alone %v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestBatcherCancelAndClose: a request whose context is cancelled leaves with the context's
// error and the others still get their samples; after Close every request fails.
func TestBatcherCancelAndClose(t *testing.T) {
	cfg := smallGQA()
	m, err := NewModel(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	cases := batcherCases(cfg.VocabSize, 6)
	want := aloneSamples(t, s, cases)
	b := NewBatcher(s, 2)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Generate(cancelled, cases[0].prompt, cases[0].opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request returned %v, want %v", err, context.Canceled)
	}
	// Requests cancelled while they decode (their contexts report it at the third step), among
	// others that run to the end.
	var wg sync.WaitGroup
	got := make([]Sample, len(cases))
	errs := make([]error, len(cases))
	for i, c := range cases {
		ctx := context.Context(context.Background())
		if i%2 == 1 {
			c.opt.StopTokens, c.opt.MaxNewTokens = nil, 30
			ctx = &cancelAfter{Context: ctx, checks: 4, done: make(chan struct{})}
		}
		wg.Go(func() { got[i], errs[i] = b.Generate(ctx, c.prompt, c.opt) })
	}
	wg.Wait()
	for i := range cases {
		switch {
		case i%2 == 1 && !errors.Is(errs[i], context.Canceled):
			t.Errorf("request %d cancelled while decoding returned %v, %v; want %v", i, got[i], errs[i], context.Canceled)
		case i%2 == 0 && (errs[i] != nil || !reflect.DeepEqual(got[i], want[i])):
			t.Errorf("request %d beside cancelled ones: %v, %v; want %v", i, got[i], errs[i], want[i])
		}
	}
	if _, err := b.Generate(context.Background(), nil, cases[0].opt); err == nil {
		t.Error("an empty prompt was accepted")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Generate(context.Background(), cases[0].prompt, cases[0].opt); !errors.Is(err, ErrBatcherClosed) {
		t.Errorf("after Close: %v, want %v", err, ErrBatcherClosed)
	}
}

// TestGenerateRowsIndependent: on the host decoder a row's sample does not depend on the other
// rows of the call: greedy rows (no random stream to share) equal their prompts alone, with
// repeated prompts (prefilled once) and rows of other lengths leaving the batch early.
func TestGenerateRowsIndependent(t *testing.T) {
	cfg, _ := BuiltinConfig("bench")
	cfg.InitStd = 0.05
	m, err := NewModel(cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(testBackend(t), m)
	if err != nil {
		t.Fatal(err)
	}
	if !s.decodesOnHost() {
		t.Skip("the backend decodes in graphs")
	}
	rng := rand.New(rand.NewPCG(5, 5))
	p := randomSeqs(rng, cfg.VocabSize, 7, 19, 3)
	prompts := [][]int32{p[0], p[1], p[0], p[2], p[0], p[1]}
	opt := SampleOptions{MaxNewTokens: 20, StopTokens: []int32{int32(rng.IntN(cfg.VocabSize)), int32(rng.IntN(cfg.VocabSize))}}
	got, err := s.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	for r, pr := range prompts {
		alone, err := s.Generate([][]int32{pr}, opt)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[r], alone[0]) {
			t.Errorf("row %d: %v in the batch, %v alone", r, got[r], alone[0])
		}
	}
}

// cancelAfter is a context that is cancelled once its Err has been asked checks times: the
// batcher asks at every decode step, so the cancellation lands while the request decodes.
type cancelAfter struct {
	context.Context
	mu     sync.Mutex
	checks int
	done   chan struct{}
}

func (c *cancelAfter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checks > 0 {
		c.checks--
		if c.checks == 0 {
			close(c.done)
		}
	}
	if c.checks == 0 {
		return context.Canceled
	}
	return nil
}

func (c *cancelAfter) Done() <-chan struct{} { return c.done }
