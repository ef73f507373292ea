package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"stx.dev/stx/internal/lineproc"
)

// exitAborted is the exit status after a second interrupt: 128 + SIGINT,
// what a shell reports for a process killed by it.
const exitAborted = 130

// stopper ends a run gracefully: the engine finishes the rollout in
// progress, checkpoints and returns. Calling it stops listening for signals.
type stopper struct {
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
	ch     chan os.Signal
}

// stopSignals are the signals that end a run like Ctrl-C: SIGHUP (the
// terminal went away) and SIGPIPE (whoever read the output went away) must
// not kill the process mid-checkpoint, which is their default.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// stopOnSignals returns a context cancelled by the first of stopSignals,
// with a message on errw; a second interrupt or termination signal exits at
// once with status 130. Checkpoints are written under a temporary name and
// renamed when complete, so the abort never leaves a half-written one.
func stopOnSignals(errw io.Writer) (context.Context, *stopper) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stopper{cancel: cancel, done: make(chan struct{}), ch: make(chan os.Signal, 4)}
	signal.Notify(s.ch, stopSignals...)
	go func() {
		stopping := false
		for {
			select {
			case <-s.done:
				return
			case sig := <-s.ch:
				if stopping && sig != syscall.SIGPIPE && sig != syscall.SIGHUP {
					fmt.Fprintf(errw, "stx: %v again: aborting without a checkpoint of this rollout\n", sig)
					// Reward commands and environments run in process groups of
					// their own, out of the terminal's reach: take them along.
					lineproc.KillAll()
					os.Exit(exitAborted)
				}
				if !stopping {
					stopping = true
					msg := fmt.Sprintf("stx: %v: stopping after this rollout with a checkpoint (interrupt again to abort)\n", sig)
					if sig == syscall.SIGPIPE {
						msg = "stx: standard output was closed: stopping after this rollout with a checkpoint\n"
					}
					fmt.Fprint(errw, msg)
				}
				cancel()
			}
		}
	}()
	return ctx, s
}

// request stops the run as the first signal would (without a message).
func (s *stopper) request() { s.cancel() }

// stop releases the signals and the context.
func (s *stopper) stop() {
	s.once.Do(func() {
		signal.Stop(s.ch)
		close(s.done)
		s.cancel()
	})
}

// stopOnBrokenPipe passes writes on until one fails because the reader is
// gone (EPIPE, e.g. `stx run ... | head`); then it stops the run like an
// interrupt and drops all further output instead of failing the writes, so
// the run still checkpoints and ends cleanly.
type stopOnBrokenPipe struct {
	w      io.Writer
	stop   func()
	mu     sync.Mutex
	broken bool
}

func (b *stopOnBrokenPipe) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken {
		return len(p), nil
	}
	n, err := b.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		b.broken = true
		b.stop()
		return len(p), nil
	}
	return n, err
}
