package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/chat"
	"stx.dev/stx/runtime/tokenizer"
	"stx.dev/stx/serve"
)

// shutdownGrace is how long a stopping server waits for the requests in flight.
const shutdownGrace = 30 * time.Second

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve a model over SGLang's and vLLM's (OpenAI) HTTP APIs",
		ArgsUsage: "MODEL",
		Description: `serve answers SGLang's native API (/generate with input_ids or text and
return_logprob, /update_weights_from_disk, /get_model_info, /health, /flush_cache) and the
OpenAI API as vLLM serves it (/v1/completions, /v1/chat/completions with logprobs, /v1/models),
sampling with stx's KV-cache decoder; concurrent requests are batched. MODEL is a Hugging Face
model directory or a built-in config (tiny, bench). Once listening it prints
"stx serve: listening on http://HOST:PORT" on stderr; SIGINT or SIGTERM finish the requests in
flight and exit. Shapes: docs/serve.md.

Example:
   stx serve ./Qwen2.5-0.5B-Instruct --port 30000 &
   curl -s localhost:30000/generate -d '{"input_ids": [1, 2, 3], "return_logprob": true,
        "sampling_params": {"max_new_tokens": 8, "temperature": 0}}'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "listen on `HOST`"},
			&cli.IntFlag{Name: "port", Value: 30000, Usage: "listen on `PORT` (0: pick a free one)"},
			&cli.IntFlag{Name: "max-batch", Value: 64, Usage: "most sequences decoded together (`N`)"},
			&cli.StringFlag{Name: "weight-version", Value: "0", Usage: "weight version of the starting weights (`V`)"},
			&cli.StringFlag{Name: "addr-file", Usage: "once listening, write the server's URL (http://HOST:PORT) to `FILE`, for scripts and supervisors"},
			backendFlag(),
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of a built-in config's weights"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("serve takes one MODEL, got %q", c.Args().Slice())
			}
			if c.Int("max-batch") < 1 {
				return usagef("--max-batch must be at least 1")
			}
			if p := c.Int("port"); p < 0 || p > 65535 {
				return usagef("--port %d is not a port number", p)
			}
			if c.String("weight-version") == "" {
				return usagef("--weight-version must not be empty")
			}
			opt, err := serveOptions(c)
			if err != nil {
				return err
			}
			srv, err := serve.New(opt)
			if err != nil {
				return err
			}
			defer srv.Close()
			ln, err := net.Listen("tcp", net.JoinHostPort(c.String("host"), strconv.Itoa(c.Int("port"))))
			if err != nil {
				return err
			}
			return runServer(c, srv, ln)
		},
	}
}

// serveOptions loads the model, its tokenizer, chat template and stop ids as stx score does.
func serveOptions(c *cli.Context) (serve.Options, error) {
	be, err := runtime.NewBackend(c.String("backend"))
	if err != nil {
		return serve.Options{}, err
	}
	fmt.Fprintln(c.App.ErrWriter, be.Describe())
	spec := c.Args().First()
	m, err := runtime.OpenModel(spec, c.Uint64("seed"))
	if err != nil {
		return serve.Options{}, err
	}
	dir := ""
	if _, builtin := runtime.BuiltinConfig(spec); !builtin {
		dir = spec
	}
	opt := serve.Options{Backend: be, Model: m, ModelPath: spec, MaxBatch: c.Int("max-batch"),
		WeightVersion: c.String("weight-version"), Log: c.App.ErrWriter}
	// Waking up after releasing the weights (POST /sleep?level=2) reads them again.
	seed := c.Uint64("seed")
	opt.Reload = func() (*runtime.Model, error) { return runtime.OpenModel(spec, seed) }
	// A model without tokenizer.json serves token ids only; one that cannot be used is an error.
	var tok tokenizer.Tokenizer
	if t, err := runtime.ModelTokenizer(m, dir); err == nil {
		tok = t
	} else if !errors.Is(err, fs.ErrNotExist) && dir != "" {
		return serve.Options{}, err
	}
	if tok != nil {
		opt.Tokenizer, opt.TokenizerPath, opt.StopTokens = tok, dir, tok.StopTokens()
		if dir == "" {
			opt.TokenizerPath = tok.Name()
		}
	} else if m.Config.EOS >= 0 {
		opt.StopTokens = []int32{int32(m.Config.EOS)}
	}
	if dir != "" && chat.Has(dir) {
		if opt.Template, err = chat.Load(dir); err != nil {
			return serve.Options{}, err
		}
	}
	return opt, nil
}

// runServer serves on ln until SIGINT or SIGTERM, then lets the requests in flight finish.
func runServer(c *cli.Context, srv *serve.Server, ln net.Listener) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	if f := c.String("addr-file"); f != "" {
		// Written whole under a temporary name, so a reader polling for it never sees half.
		tmp := f + ".tmp"
		if err := os.WriteFile(tmp, []byte(url+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, f); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "stx serve: listening on %s\n", url)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	fmt.Fprintln(c.App.ErrWriter, "stx serve: stopping: finishing the requests in flight")
	srv.SetClosing()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("stx serve: shutdown: %w", err)
	}
	fmt.Fprintln(c.App.ErrWriter, "stx serve: stopped")
	return nil
}
