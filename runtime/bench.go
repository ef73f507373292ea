package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// BenchOptions sizes the runtime benchmark (defaults in parentheses).
type BenchOptions struct {
	Runs      int // timed repetitions of each measurement after one warm-up run (3)
	Batch     int // sequences per batch (8)
	SeqLen    int // tokens per sequence for forward and training (256)
	PromptLen int // prompt tokens for sampling (32)
	NewTokens int // generated tokens per sequence (128)
	Seed      uint64
	// Only, when set, is a comma-separated list of the measurements to run (BenchNames): at a
	// real model's shape the train steps may need more memory than the machine has while
	// forward and sampling still fit.
	Only string
	// LoRA, when set, gives the model these adapters before measuring: the forward and
	// sampling runs compute base + adapters (the sampler merges them into its copy), the train
	// steps train the adapters alone with the base, adapters off, as the frozen reference (no
	// second copy of the weights, as a LoRA role runs).
	LoRA *LoRAConfig
}

// BenchNames are the measurements of Bench, in the order it runs them.
var BenchNames = []string{"forward_logprobs", "grpo_train_step", "sft_train_step", "kv_cache_sampling"}

// Selected returns which measurements to run, or an error naming an unknown one.
func (o BenchOptions) Selected() (map[string]bool, error) {
	sel := map[string]bool{}
	if strings.TrimSpace(o.Only) == "" {
		for _, n := range BenchNames {
			sel[n] = true
		}
		return sel, nil
	}
	for _, n := range strings.Split(o.Only, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(BenchNames, n) {
			return nil, fmt.Errorf("unknown measurement %q (have %s)", n, strings.Join(BenchNames, ", "))
		}
		sel[n] = true
	}
	return sel, nil
}

func (o BenchOptions) withDefaults() BenchOptions {
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Batch <= 0 {
		o.Batch = 8
	}
	if o.SeqLen <= 0 {
		o.SeqLen = 256
	}
	if o.PromptLen <= 0 {
		o.PromptLen = 32
	}
	if o.NewTokens <= 0 {
		o.NewTokens = 128
	}
	return o
}

// Measurement is one benchmark result: tokens per second and achieved GFLOP/s at the median
// of the timed runs.
type Measurement struct {
	Name       string  `json:"name"`
	TokensPerS float64 `json:"tokens_per_s"`
	GFLOPs     float64 `json:"gflops"`
	MedianS    float64 `json:"median_s"`
	Runs       int     `json:"runs"`
	// PeakRSSMiB is the process's peak resident memory (VmHWM) once the measurement is done:
	// a high-water mark over the whole process so far, so it never decreases from one
	// measurement to the next.
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	// VsPeer is TokensPerS over PeerTokensPerS, set only for the "bench" model at the default
	// sizes (the peer was measured there).
	VsPeer float64 `json:"vs_peer,omitempty"`
}

// PeerTokensPerS are the PyTorch 1.13 CPU (OpenBLAS, 2 threads) figures for the "bench" model at
// the default sizes, measured on stx's 2-core development machine (the lower ends of the
// measured ranges): the targets stx's CPU backend is held to.
var PeerTokensPerS = map[string]float64{
	"forward_logprobs":  11000,
	"grpo_train_step":   3000,
	"kv_cache_sampling": 2000,
}

// SetPeerRatios fills VsPeer of each measurement that has a peer figure.
func SetPeerRatios(ms []Measurement) {
	for i := range ms {
		if peer, ok := PeerTokensPerS[ms[i].Name]; ok {
			ms[i].VsPeer = ms[i].TokensPerS / peer
		}
	}
}

// forwardFLOPs estimates the multiply-adds ×2 of a forward pass over rows×length tokens
// (attention computed over the full padded length, as the graph does).
func forwardFLOPs(c Config, rows, length int) float64 {
	d, kv, q := float64(c.Hidden), float64(c.KVHeads*c.HeadDim()), float64(c.QDim())
	perToken := 2*(2*d*q+2*d*kv+3*d*float64(c.Intermediate))*float64(c.Layers) + 2*d*float64(c.VocabSize)
	attn := 4 * q * float64(length) * float64(c.Layers)
	return float64(rows*length) * (perToken + attn)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// timeRuns runs fn once to warm up (compilation), then opt.Runs times, and returns the median.
func timeRuns(runs int, fn func() error) (float64, error) {
	if err := fn(); err != nil {
		return 0, err
	}
	var ts []float64
	for range runs {
		start := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(start).Seconds())
	}
	return median(ts), nil
}

// benchPolicyLoss is the benchmark's GRPO-style policy loss: PPO clipped ratio against old
// log-probs with per-sequence advantages, plus β·k3 KL to a frozen reference's log-probs,
// token-mean over the mask. It is a representative workload, not the specializations' loss.
func benchPolicyLoss(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
	lp := m.TokenLogProbs(ctx, batch["tokens"], batch["targets"])
	mask := batch["mask"]
	adv := InsertAxes(batch["advantages"], -1)
	ratio := Exp(Sub(lp, batch["old_logp"]))
	surr := Min(Mul(ratio, adv), Mul(ClipScalar(ratio, 0.8, 1.28), adv))
	d := Sub(batch["ref_logp"], lp)
	k3 := Sub(Sub(Exp(d), d), OnesLike(d))
	loss := MaskedMean(Sub(MulScalar(k3, 0.04), surr), mask)
	return loss, map[string]*Node{"kl": MaskedMean(k3, mask)}
}

// benchSFTLoss is the token-mean negative log-likelihood of the targets.
func benchSFTLoss(ctx *context.Context, m *Model, batch map[string]*Node) (*Node, map[string]*Node) {
	return Neg(MaskedMean(m.TokenLogProbs(ctx, batch["tokens"], batch["targets"]), batch["mask"])), nil
}

// peakRSSMiB returns the process's peak resident set size (VmHWM of /proc/self/status) in
// MiB, 0 where it cannot be read.
func peakRSSMiB() float64 {
	kb, _ := procKB("/proc/self/status", "VmHWM:")
	return float64(kb) / 1024
}

// Bench measures forward log-probs, one GRPO-style train step (frozen reference forward +
// policy forward/backward + clipping + AdamW) and KV-cache sampling with model m's config on
// backend b. The model's weights are used for the forward and sampling runs; training runs on
// a copy initialised from seed so m is left untouched.
func Bench(b *Backend, m *Model, opt BenchOptions) ([]Measurement, error) {
	opt = opt.withDefaults()
	want, err := opt.Selected()
	if err != nil {
		return nil, err
	}
	if opt.LoRA != nil {
		if err := m.AddLoRA(*opt.LoRA, opt.Seed+2); err != nil {
			return nil, err
		}
	}
	c := m.Config
	rng := rand.New(rand.NewPCG(opt.Seed, 1))
	rows, length := opt.Batch, opt.SeqLen
	seqs := make([][]int32, rows)
	for i := range seqs {
		seqs[i] = make([]int32, length)
		for j := range seqs[i] {
			seqs[i][j] = int32(rng.IntN(c.VocabSize))
		}
	}
	var out []Measurement
	add := func(name string, tokens, flops, sec float64) {
		out = append(out, Measurement{Name: name, TokensPerS: tokens / sec, GFLOPs: flops / sec / 1e9, MedianS: sec, Runs: opt.Runs,
			PeakRSSMiB: peakRSSMiB()})
	}

	// Forward log-probs.
	sc, err := NewScorer(b, m)
	if err != nil {
		return nil, err
	}
	if want["forward_logprobs"] {
		sec, err := timeRuns(opt.Runs, func() error { _, err := sc.Score(seqs); return err })
		if err != nil {
			return nil, fmt.Errorf("bench forward: %w", err)
		}
		add("forward_logprobs", float64(rows*length), forwardFLOPs(c, rows, length), sec)
	}
	if want["grpo_train_step"] || want["sft_train_step"] {
		if err := benchTrain(b, m, sc, seqs, rng, opt, want, add); err != nil {
			return nil, err
		}
	}
	if want["kv_cache_sampling"] {
		if err := benchSampling(b, m, seqs, opt, add); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// benchTrain times the GRPO-style and SFT steps that want selects.
func benchTrain(b *Backend, m *Model, sc *Scorer, seqs [][]int32, rng *rand.Rand, opt BenchOptions, want map[string]bool,
	add func(name string, tokens, flops, sec float64)) error {
	c := m.Config
	rows, length := opt.Batch, opt.SeqLen

	// GRPO-style train step: the reference's forward (frozen, separate graph, as a sync would
	// run it; m, which training leaves untouched, plays the reference) and the policy's step.
	policy, refScorer := m, sc
	if m.LoRA() != nil {
		// LoRA: the policy is m's adapters, the reference m's base.
		var err error
		if refScorer, err = NewScorer(b, m.WithoutAdapters()); err != nil {
			return err
		}
	} else {
		var err error
		if policy, err = NewModel(c, opt.Seed+1); err != nil {
			return err
		}
		policy.ActivationCheckpointing = m.ActivationCheckpointing
		policy.ComputeDType = m.ComputeDType
	}
	pad := int32(max(c.PAD, 0))
	tokens, mask, err := PadTokens(seqs, rows, length, pad)
	if err != nil {
		return err
	}
	targets, tmask := ShiftTargets(tokens, mask, rows, length, pad)
	adv := make([]float32, rows)
	for i := range adv {
		adv[i] = float32(rng.NormFloat64())
	}
	if want["grpo_train_step"] {
		tr, err := NewTrainer(b, policy, benchPolicyLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1,
			Schedule: Schedule{Kind: "constant", BaseLR: 1e-5}})
		if err != nil {
			return err
		}
		sec, err := timeRuns(opt.Runs, func() error {
			ref, err := refScorer.Score(seqs)
			if err != nil {
				return err
			}
			refLP := make([]float32, rows*length)
			for r := range rows {
				copy(refLP[r*length:], ref[r].LogProbs)
			}
			_, err = tr.Step([]map[string]*tensors.Tensor{{
				"tokens":     tensors.FromFlatDataAndDimensions(tokens, rows, length),
				"targets":    tensors.FromFlatDataAndDimensions(targets, rows, length),
				"mask":       tensors.FromFlatDataAndDimensions(tmask, rows, length),
				"advantages": tensors.FromFlatDataAndDimensions(adv, rows),
				"old_logp":   tensors.FromFlatDataAndDimensions(refLP, rows, length),
				"ref_logp":   tensors.FromFlatDataAndDimensions(refLP, rows, length),
			}})
			return err
		})
		if err != nil {
			return fmt.Errorf("bench train step: %w", err)
		}
		// Reference forward + policy forward + backward (≈ 2× forward).
		add("grpo_train_step", float64(rows*length), 4*forwardFLOPs(c, rows, length), sec)
	}
	if !want["sft_train_step"] {
		return nil
	}

	// SFT step: masked next-token NLL (forward + backward + AdamW), by a second trainer of the
	// same policy (the optimizer state variables, found by name in the model's context, are
	// the first trainer's: no second copy in memory).
	sft, err := NewTrainer(b, policy, benchSFTLoss, TrainerConfig{AdamW: DefaultAdamW(), MaxGradNorm: 1,
		Schedule: Schedule{Kind: "constant", BaseLR: 1e-5}})
	if err != nil {
		return err
	}
	sec, err := timeRuns(opt.Runs, func() error {
		_, err := sft.Step([]map[string]*tensors.Tensor{{
			"tokens":  tensors.FromFlatDataAndDimensions(tokens, rows, length),
			"targets": tensors.FromFlatDataAndDimensions(targets, rows, length),
			"mask":    tensors.FromFlatDataAndDimensions(tmask, rows, length),
		}})
		return err
	})
	if err != nil {
		return fmt.Errorf("bench sft step: %w", err)
	}
	add("sft_train_step", float64(rows*length), 3*forwardFLOPs(c, rows, length), sec)
	return nil
}

// benchSampling times KV-cache sampling of opt.NewTokens tokens after prompts cut from seqs.
func benchSampling(b *Backend, m *Model, seqs [][]int32, opt BenchOptions, add func(name string, tokens, flops, sec float64)) error {
	c := m.Config
	rows := opt.Batch
	sampler, err := NewSampler(b, m)
	if err != nil {
		return err
	}
	prompts := make([][]int32, rows)
	for i := range prompts {
		prompts[i] = seqs[i][:opt.PromptLen]
	}
	sec, err := timeRuns(opt.Runs, func() error {
		_, err := sampler.Generate(prompts, SampleOptions{MaxNewTokens: opt.NewTokens, Temperature: 1, Seed: opt.Seed})
		return err
	})
	if err != nil {
		return fmt.Errorf("bench sampling: %w", err)
	}
	capacity := BucketLength(BucketLength(opt.PromptLen) + opt.NewTokens)
	flops := forwardFLOPs(c, rows, BucketLength(opt.PromptLen)) + float64(opt.NewTokens)*forwardFLOPs(c, rows, 1) +
		float64(opt.NewTokens*rows)*4*float64(c.QDim()*c.Layers)*float64(capacity)
	add("kv_cache_sampling", float64(rows*opt.NewTokens), flops, sec)
	return nil
}
