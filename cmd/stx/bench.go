package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/runtime"
)

// backendFlag selects the compute backend (see runtime.NewBackend).
func backendFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "backend",
		Usage:   "compute `BACKEND`: cpu (stx's CPU backend with OpenBLAS), go (GoMLX's pure-Go SimpleGo), xla:cuda, xla:/path/to/pjrt_plugin.so; default $GOMLX_BACKEND, else cpu when OpenBLAS is installed, else go",
		EnvVars: []string{"STX_BACKEND"},
	}
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure forward log-probs, a GRPO-style train step and KV-cache sampling",
		Description: `bench times four workloads on a model (default: the built-in "bench" config,
vocab 2048, hidden 256, 4 layers): forward log-probs of 8 x 256 tokens; one GRPO-style
train step on them (frozen reference forward, policy forward/backward, clipping, AdamW);
one SFT step (NLL forward/backward, AdamW); and sampling 128 new tokens for 8 prompts of
32 tokens with the KV cache (sizes set by --batch, --seq-len, --prompt-len, --new-tokens).
Each is run once to compile, then --runs times; the median is reported as tokens/s and
achieved GFLOP/s, with the process's peak resident memory so far. For
the "bench" model, VS PEER is the ratio to PyTorch's CPU figures on stx's 2-core development
machine (forward 11,000, train step 3,000, sampling 2,000 tokens/s).

Example:
   stx bench --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Value: "bench", Usage: "model `DIR` or built-in config (tiny, bench)"},
			backendFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per measurement"},
			&cli.IntFlag{Name: "runs", Value: 3, Usage: "timed runs per measurement (`N`)"},
			&cli.IntFlag{Name: "batch", Value: 8, Usage: "sequences per batch (`N`)"},
			&cli.IntFlag{Name: "seq-len", Value: 256, Usage: "tokens per sequence of the forward and train steps (`N`)"},
			&cli.IntFlag{Name: "prompt-len", Value: 32, Usage: "prompt tokens of the sampling run (`N`)"},
			&cli.IntFlag{Name: "new-tokens", Value: 128, Usage: "tokens generated per prompt (`N`)"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the weights and data"},
			&cli.StringFlag{Name: "only", Usage: "run only the measurements in `LIST` (comma-separated: forward_logprobs, grpo_train_step, sft_train_step, kv_cache_sampling)"},
			&cli.BoolFlag{Name: "activation-checkpointing", Usage: "recompute each layer's activations in the train steps' backward pass (model.activation_checkpointing)"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "compute `DTYPE` of the model's matrix products (model.dtype): float32, or bfloat16 (bf16 products with f32 accumulation, f32 weights and AdamW)"},
			&cli.IntFlag{Name: "lora", Usage: "train LoRA adapters of rank `R` on the frozen model instead of all its weights (0: full fine-tuning)"},
			&cli.Float64Flag{Name: "lora-alpha", Usage: "LoRA `ALPHA` (default 2×rank)"},
			&cli.StringFlag{Name: "lora-targets", Value: "all-linear", Usage: "comma-separated `MODULES` that get adapters (q_proj, ..., down_proj, or all-linear)"},
			&cli.StringFlag{Name: "lora-base-dtype", Usage: "`DTYPE` the frozen base is held in with --lora: bfloat16 or float32 (default: the dtype it is stored in)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the whole benchmark (compilation and warm-up runs included; narrow it with --only) to `FILE` (read it with go tool pprof)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("bench takes no arguments, got %q", c.Args().Slice())
			}
			for _, f := range []string{"runs", "batch", "seq-len", "prompt-len", "new-tokens"} {
				if c.Int(f) < 1 {
					return usagef("--%s must be at least 1", f)
				}
			}
			if _, err := (runtime.BenchOptions{Only: c.String("only")}).Selected(); err != nil {
				return usagef("--only: %v", err)
			}
			if c.Int("prompt-len") > c.Int("seq-len") {
				return usagef("--prompt-len %d exceeds --seq-len %d", c.Int("prompt-len"), c.Int("seq-len"))
			}
			dt, err := runtime.ParseComputeDType(c.String("dtype"))
			if err != nil {
				return usagef("--dtype: %v", err)
			}
			be, err := runtime.NewBackend(c.String("backend"))
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.ErrWriter, be.Describe())
			if d := be.ComputeDTypeDescription(dt); d != "" {
				fmt.Fprintln(c.App.ErrWriter, d)
			}
			var m *runtime.Model
			if c.Int("lora") != 0 {
				// The base the adapters freeze is read as it will be held (bf16 stays bf16).
				m, err = runtime.OpenModelForLoRA(c.String("model"), c.Uint64("seed"), c.String("lora-base-dtype"))
			} else {
				m, err = runtime.OpenModel(c.String("model"), c.Uint64("seed"))
			}
			if err != nil {
				return err
			}
			m.ActivationCheckpointing = c.Bool("activation-checkpointing")
			m.ComputeDType = dt
			if path := c.String("cpuprofile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return fmt.Errorf("cpu profile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("cpu profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			opt := runtime.BenchOptions{Runs: c.Int("runs"), Batch: c.Int("batch"), SeqLen: c.Int("seq-len"),
				PromptLen: c.Int("prompt-len"), NewTokens: c.Int("new-tokens"), Seed: c.Uint64("seed"), Only: c.String("only")}
			if r := c.Int("lora"); r != 0 {
				lc := runtime.LoRAConfig{Rank: r, Alpha: c.Float64("lora-alpha"), Targets: strings.Split(c.String("lora-targets"), ","),
					BaseDType: c.String("lora-base-dtype")}
				if lc.Alpha == 0 {
					lc.Alpha = 2 * float64(r)
				}
				if err := lc.Validate(); err != nil {
					return usagef("--lora: %v", err)
				}
				opt.LoRA = &lc
			}
			ms, err := runtime.Bench(be, m, opt)
			if err != nil {
				return err
			}
			if c.String("model") == "bench" && opt == (runtime.BenchOptions{Runs: opt.Runs, Batch: 8, SeqLen: 256, PromptLen: 32, NewTokens: 128, Seed: opt.Seed}) {
				runtime.SetPeerRatios(ms)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				for _, x := range ms {
					if err := enc.Encode(x); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MEASUREMENT\tTOKENS/S\tGFLOP/S\tMEDIAN S\tRUNS\tPEAK RSS MiB\tVS PEER")
			for _, x := range ms {
				vs := "-"
				if x.VsPeer > 0 {
					vs = fmt.Sprintf("%.2f×", x.VsPeer)
				}
				fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.3f\t%d\t%.0f\t%s\n", x.Name, x.TokensPerS, x.GFLOPs, x.MedianS, x.Runs, x.PeakRSSMiB, vs)
			}
			return tw.Flush()
		},
	}
}
