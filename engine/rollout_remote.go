package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"stx.dev/stx/engine/remote"
	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/runtime"
)

// remoteGen generates rollouts on the inference servers of the recipe's rollout block
// (engine/remote) and keeps them on the trainer's weights: the sync_to_rollout role's
// weights are written as a Hugging Face directory (temporary name, then renamed) and every
// server is told to load them, once before the first generation and after every rollout's
// training (updateWeights). Version v is the weights after v rollouts' training; an answer
// sampled with a version older than the trainer's minus max_staleness is refused and asked
// of another server.
type remoteGen struct {
	l      *loop
	role   *role // the role whose weights the servers sample with
	client *remote.Client
	// version is the weight version the servers were last told to load (-1: none yet).
	version int

	mu      sync.Mutex
	metrics map[string]float64 // since the last rollout's metrics were taken
	// console are console events waiting for the loop's goroutine (flush): generation may
	// run in another one (async.go).
	console []func()

	// Asynchronous rollouts (async.go), used by the loop's goroutine only: pipe is the
	// goroutine generating ahead (nil: none runs), queue the rollouts generated ahead and
	// not yet taken, in order, waited the seconds the loop waited for pipe since the last
	// rollout was taken.
	pipe   *pipeline
	queue  []*ahead
	waited float64
}

// rolloutGenerator is the generator of the rollout role r: the in-process sampler, or
// the recipe's rollout engine.
func (l *loop) rolloutGenerator(r *role) (Generator, error) {
	ro := l.rec.Rollout
	if ro == nil {
		return l.rolloutSampler(r)
	}
	c, err := remote.New(remote.Config{Engine: ro.Engine, Servers: ro.Servers, Model: ro.Model,
		Timeout: seconds(ro.TimeoutS), UpdateTimeout: seconds(ro.UpdateTimeoutS), Attempts: ro.Attempts,
		ShardRows: ro.ShardRows, Vocab: r.model.Config.VocabSize})
	if err != nil {
		return nil, err
	}
	return &remoteGen{l: l, role: r, client: c, version: -1, metrics: map[string]float64{}}, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Generate completes prompts on the servers, after loading the trainer's current weights
// into them if they have not been yet.
func (g *remoteGen) Generate(prompts [][]int32, o runtime.SampleOptions) ([]runtime.Sample, error) {
	if g.version < 0 {
		if err := g.start(); err != nil {
			return nil, err
		}
	}
	g.client.SetMinVersion(max(g.version-g.l.rec.Knobs.MaxStaleness, 0))
	t := time.Now()
	out, err := g.client.Generate(prompts, o)
	g.mu.Lock()
	g.metrics["time/remote_generate"] += time.Since(t).Seconds()
	g.mu.Unlock()
	g.record()
	return out, err
}

// start checks the servers and loads the trainer's weights into them: a run (or a
// resumed one) never samples with weights the server happened to hold.
func (g *remoteGen) start() error {
	down, err := g.client.Health()
	if err != nil {
		return err
	}
	g.mu.Lock()
	for _, d := range down {
		g.warn("rollout server down at start: " + d)
	}
	g.mu.Unlock()
	// Servers left asleep by an earlier run (a resumed one) wake up first.
	if err := g.wake(); err != nil {
		return err
	}
	return g.sync(g.l.state.Rollout + 1)
}

// wake has the servers take their memory back, with sleep_between, before they load
// weights: SGLang and vLLM load into the memory they hold.
func (g *remoteGen) wake() error {
	if !g.l.rec.Rollout.SleepBetween {
		return nil
	}
	err := g.client.WakeUp()
	g.record()
	return err
}

// sync writes the rollout role's weights as version v and has every server load them.
func (g *remoteGen) sync(v int) error {
	root := g.weightsRoot()
	t := time.Now()
	dir, err := writeWeights(g.role.model, root, v)
	if err != nil {
		return fmt.Errorf("rollout weights: %w", err)
	}
	tWrite := time.Since(t)
	if err := g.client.UpdateWeights(dir, v); err != nil {
		g.record()
		return err
	}
	g.version = v
	g.mu.Lock()
	g.metrics["time/remote_write_weights"] += tWrite.Seconds()
	g.mu.Unlock()
	g.record()
	g.flush()
	g.l.con.event("update_weights", map[string]any{"version": v, "dir": dir, "write_seconds": tWrite.Seconds(),
		"seconds": time.Since(t).Seconds()})
	pruneWeights(root, v)
	return nil
}

// weightsRoot is the directory the synced weights go to.
func (g *remoteGen) weightsRoot() string {
	if d := g.l.rec.Rollout.WeightsDir; d != "" {
		return d
	}
	return filepath.Join(g.l.dir.Path(), "rollout_weights")
}

// record moves the client's events into events.jsonl (as warnings) and the console
// (at the next flush), and its counters into the metrics of the rollout.
func (g *remoteGen) record() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.client.TakeEvents() {
		switch e.Type {
		case "remote_retry":
			g.warn(fmt.Sprintf("rollout server %s failed (attempt %d), asking another: %s", e.Server, e.Attempt, e.Err))
		case "remote_update_failed":
			g.warn(fmt.Sprintf("rollout server %s did not load weight version %d (it loads them before its next request): %s", e.Server, e.Version, e.Err))
		case "remote_sleep_failed":
			g.warn(fmt.Sprintf("rollout server %s did not release its memory for the training: %s", e.Server, e.Err))
		case "remote_wake_up_failed":
			g.warn(fmt.Sprintf("rollout server %s did not take its memory back (its requests go to the others): %s", e.Server, e.Err))
		}
		g.console = append(g.console, func() {
			g.l.con.event(e.Type, map[string]any{"server": e.Server, "attempt": e.Attempt, "version": e.Version,
				"seconds": e.Seconds, "error": e.Err})
		})
	}
	for name, v := range g.client.Metrics() {
		if old, ok := g.metrics[name]; ok && name == "remote/oldest_weight_version" {
			g.metrics[name] = min(old, v)
		} else if strings.HasSuffix(name, "weight_version") {
			g.metrics[name] = v
		} else {
			g.metrics[name] += v
		}
	}
}

// flush prints the console events recorded since the last flush; only the loop's
// goroutine calls it.
func (g *remoteGen) flush() {
	g.mu.Lock()
	pending := g.console
	g.console = nil
	g.mu.Unlock()
	for _, f := range pending {
		f()
	}
}

// warn records a warning in events.jsonl (safe from any goroutine); the run goes on. The
// caller holds g.mu.
func (g *remoteGen) warn(msg string) {
	if g.l.dir == nil {
		return
	}
	// The rollout the servers' weights were trained for is the one generated (on-policy;
	// the one before it when generated ahead): g.version, which only the loop's goroutine
	// changes, between generations.
	if err := g.l.dir.LogEvent(rundir.Event{Type: rundir.EventWarning, Rollout: max(g.version, 0), Message: msg}); err != nil {
		g.console = append(g.console, func() { g.l.con.printf("events.jsonl: %v\n", err) })
	}
}

// takeMetrics returns the metrics since the last call.
func (g *remoteGen) takeMetrics() map[string]float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.metrics
	g.metrics = map[string]float64{}
	return m
}

// syncRemote loads the weights of the rollout just trained into the servers as the next
// version. It does nothing without a rollout engine, or before the servers' first load
// (which the first generation does).
func (l *loop) syncRemote() error {
	g, ok := l.gen.sampler.(*remoteGen)
	if !ok || g.version < 0 {
		return nil
	}
	// The rollout generated ahead used the servers' current weights: it ends first.
	if err := l.gen.join(g); err != nil {
		return err
	}
	if err := g.wake(); err != nil {
		return err
	}
	return g.sync(g.version + 1)
}

// remoteDone ends a rollout's generation with a rollout engine: with sleep_between the
// servers release their memory for the training (a failure is a warning: the run goes on
// beside servers that kept it), and the engine's metrics since the last rollout go into
// b's metrics.
func (g *rolloutGen) remoteDone(b *batch) {
	r, ok := g.sampler.(*remoteGen)
	if !ok || b == nil {
		return
	}
	if g.rec.Rollout.SleepBetween && g.rec.Knobs.MaxStaleness == 0 { // vet refuses both
		_ = r.client.Sleep() // recorded as events
		r.record()
	}
	for name, v := range r.takeMetrics() {
		b.metrics[name] = v
	}
	// The weights b was sampled with: the oldest version an answer carried (a server that
	// missed an update answers with an older one, max_staleness permitting).
	v := float64(r.version)
	if old, ok := b.metrics["remote/oldest_weight_version"]; ok {
		v = min(v, old)
	}
	b.metrics["rollout/weight_version"] = v
}

// writeWeights writes m as version v under root: into a temporary directory, renamed to
// v<v> once complete, so that a server never reads a half-written version.
func writeWeights(m *runtime.Model, root string, v int) (string, error) {
	// The servers resolve the path in their own working directory.
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(root, "v"+strconv.Itoa(v))
	tmp, err := os.MkdirTemp(root, ".tmp-v"+strconv.Itoa(v)+"-")
	if err != nil {
		return "", err
	}
	if err := m.SaveHF(tmp, 0); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	// A directory of the same version from an earlier attempt (a resumed run) is replaced.
	if err := os.RemoveAll(final); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return final, nil
}

// pruneWeights removes the versions under root older than v−1 (a server catching up
// loads the latest; the one before stays for a load in progress) and temporary
// directories left by an interrupted write (writes are sequential: none is in progress).
func pruneWeights(root string, v int) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		n, err := strconv.Atoi(strings.TrimPrefix(name, "v"))
		if strings.HasPrefix(name, ".tmp-v") || strings.HasPrefix(name, "v") && err == nil && n < v-1 {
			os.RemoveAll(filepath.Join(root, name))
		}
	}
}
