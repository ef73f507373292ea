package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/hub"
	"stx.dev/stx/internal/plainfile"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
)

// Built-in starting models: model sources that name a model stx trains itself, on first use,
// by supervised fine-tuning on the recipe's own task, and caches. They give every recipe
// family something to learn from without downloads: an RL policy that already answers part
// of the task (so that a group of samples holds right and wrong answers), and a teacher that
// is larger than the student and knows the task better.
//
// A starting model is keyed by everything that decides its weights: the architecture, the
// SFT settings below, the recipe's task section and task knobs, the seed and the backend
// (the cpu backend and SimpleGo sum in different orders). The same key always gives the same
// weights, so a cached model and a rebuilt one are interchangeable.
type starter struct {
	// Base is the built-in config the model starts from; Widen replaces its sizes when set.
	Base  string
	Widen *runtime.Config
	// The SFT run: Steps optimizer steps of Batch examples at a constant LR.
	Steps, Batch int
	LR           float64
	// What the source is, for `stx knobs`-style help and error messages.
	Doc string
}

// teacherConfig is the architecture of tiny-teacher: the tiny model twice as wide and one
// layer deeper (about 6× its parameters), so a distilled student has a teacher distinct from
// itself in size as well as in training.
func teacherConfig() runtime.Config {
	c, _ := runtime.BuiltinConfig("tiny")
	c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Intermediate = 128, 3, 4, 2, 256
	return c
}

// starters are the built-in starting models by source name. tiny-sft's 150 steps of 16 leave
// the tiny model answering about half of 1-digit addition (loss ≈ 0.43): a middling policy
// whose groups hold right and wrong answers, and which longer SFT would turn into one that
// memorised the 80 training sums. tiny-teacher trains its larger model 3× longer.
var starters = map[string]starter{
	"tiny-sft": {Base: "tiny", Steps: 150, Batch: 16, LR: 3e-3,
		Doc: "the tiny model after 150 SFT steps on the recipe's task"},
	"tiny-teacher": {Base: "tiny", Steps: 450, Batch: 16, LR: 3e-3,
		Doc: "a larger model (hidden 128, 3 layers) after 450 SFT steps on the recipe's task"},
}

func init() {
	t := starters["tiny-teacher"]
	c := teacherConfig()
	t.Widen = &c
	starters["tiny-teacher"] = t
}

// StarterNames are the built-in starting model sources, sorted.
func StarterNames() []string {
	var names []string
	for n := range starters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// IsStarter reports whether a model source names a built-in starting model.
func IsStarter(source string) bool {
	_, ok := starters[source]
	return ok
}

// CacheDir is where stx keeps what it builds once and reuses: $STX_CACHE_DIR, else the
// user's cache directory ($XDG_CACHE_HOME or ~/.cache on Linux) + "/stx".
func CacheDir() (string, error) {
	if d := os.Getenv("STX_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set STX_CACHE_DIR): %w", err)
	}
	return filepath.Join(d, "stx"), nil
}

// starterKey is what decides a starting model's weights, hashed into its cache name.
type starterKey struct {
	Version   int             `json:"version"` // bump when the build changes
	Name      string          `json:"name"`
	Config    runtime.Config  `json:"config"`
	Steps     int             `json:"steps"`
	Batch     int             `json:"batch"`
	LR        float64         `json:"lr"`
	Task      schema.Task     `json:"task"`
	Files     []string        `json:"files,omitempty"` // sha256 of a JSONL task's files
	Knobs     starterTaskKnob `json:"knobs"`
	Backend   string          `json:"backend"`
	MaxPrompt int             `json:"max_prompt_tokens"`
}

type starterTaskKnob struct {
	Seed   int    `json:"seed"`
	Digits int    `json:"task_digits"`
	Ops    string `json:"task_ops"`
}

func (s starter) config() runtime.Config {
	if s.Widen != nil {
		return *s.Widen
	}
	c, _ := runtime.BuiltinConfig(s.Base)
	return c
}

func (s starter) key(name string, rec *schema.Recipe, backend string) (starterKey, error) {
	k := rec.Knobs
	key := starterKey{Version: 1, Name: name, Config: s.config(), Steps: s.Steps, Batch: s.Batch, LR: s.LR,
		Task: rec.Task, Knobs: starterTaskKnob{Seed: k.Seed, Digits: k.TaskDigits, Ops: k.TaskOps},
		Backend: backend, MaxPrompt: k.MaxPromptTokens}
	key.Task.RewardRole = ""
	// The SFT trains on the task's prompts and answers alone: neither the
	// workflow nor the rewards (which only score its evaluation, and may be
	// a user's external service) change its weights.
	key.Task.Workflow = nil
	key.Task.Reward = nil
	files, err := tasks.LocalDataFiles(rec.Task)
	if err != nil {
		return key, err
	}
	for _, p := range files {
		sum, err := fileSum(p)
		if err != nil {
			return key, fmt.Errorf("task file: %w", err)
		}
		key.Files = append(key.Files, sum)
	}
	return key, nil
}

// fileSum is the sha256 of a dataset file, streamed (a dataset may be
// larger than memory), never from a FIFO or a device.
func fileSum(path string) (string, error) {
	f, _, err := plainfile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// starterDirs resolves every built-in starting model the recipe's roles name (directly or
// through init_from) to its cached directory, building the missing ones. say reports a build.
func starterDirs(ctx context.Context, rec *schema.Recipe, backend *runtime.Backend, say func(string, ...any)) (map[string]string, error) {
	out := map[string]string{}
	for _, r := range rec.Roles {
		src := r.Model.Source
		if !IsStarter(src) || out[src] != "" {
			continue
		}
		dir, built, err := starterDir(ctx, src, rec, backend)
		if err != nil {
			return nil, fmt.Errorf("role %q: model %q: %w", r.Name, src, err)
		}
		if built > 0 {
			say("built the starting model %s (%s) in %.1fs: %s\n", src, starters[src].Doc, built.Seconds(), dir)
		}
		out[src] = dir
	}
	return out, nil
}

// starterDir returns the cached directory of starting model name for rec's task, building it
// first when absent (built > 0 then). The build writes to a temporary directory beside the
// cache entry and renames it into place, so a reader never sees a half-written model, and of
// two runs building the same entry at once the second to finish keeps the first's (equal)
// result.
func starterDir(ctx context.Context, name string, rec *schema.Recipe, backend *runtime.Backend) (dir string, built time.Duration, err error) {
	s := starters[name]
	dir, js, err := starterPath(name, rec, backend.Name())
	if err != nil {
		return "", 0, err
	}
	models := filepath.Dir(dir)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir, 0, nil
	}
	if err := os.MkdirAll(models, 0o755); err != nil {
		return "", 0, fmt.Errorf("cache: %w", err)
	}
	var nonce [6]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", 0, err
	}
	sweepBuilds(models)
	// The builder's pid in the name lets a later run sweep what a killed one left.
	tmp := filepath.Join(models, fmt.Sprintf(".tmp-%s-%d-%s", filepath.Base(dir), os.Getpid(), hex.EncodeToString(nonce[:])))
	defer os.RemoveAll(tmp)
	t0 := time.Now()
	if err := buildStarter(ctx, s, rec, backend.Spec, tmp); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "starter.json"), append(js, '\n'), 0o644); err != nil {
		return "", 0, fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run renamed its build into place first: keep that one.
		if _, serr := os.Stat(filepath.Join(dir, "config.json")); serr == nil {
			return dir, time.Since(t0), nil
		}
		return "", 0, fmt.Errorf("cache: %w", err)
	}
	return dir, time.Since(t0), nil
}

// sweepBuilds removes the temporary directories of starting-model builds
// whose process is gone (killed with -9, or aborted by a second interrupt
// before its deferred clean-up ran): ".tmp-<entry>-<pid>-<nonce>" and its
// ".work". A build of a live process is left alone; where liveness cannot be
// told (no pid in the name, or no signal 0), a day's age decides.
func sweepBuilds(models string) {
	entries, err := os.ReadDir(models)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, ".tmp-") {
			continue
		}
		stem := strings.TrimSuffix(name, ".work")
		parts := strings.Split(stem, "-")
		dead := false
		if len(parts) >= 3 {
			if pid, err := strconv.Atoi(parts[len(parts)-2]); err == nil && pid > 0 && goruntime.GOOS != "windows" {
				dead = !processAlive(pid)
			}
		}
		if !dead {
			info, err := e.Info()
			dead = err == nil && time.Since(info.ModTime()) > 24*time.Hour
		}
		if dead {
			os.RemoveAll(filepath.Join(models, name))
		}
	}
}

// processAlive tells whether pid names a running process (one of another
// user's counts: signal 0 is then refused with EPERM).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// starterPath is the cache directory of starting model name for rec on backend, and the
// key it is named after (JSON).
func starterPath(name string, rec *schema.Recipe, backend string) (string, []byte, error) {
	s, ok := starters[name]
	if !ok {
		return "", nil, fmt.Errorf("no built-in starting model %q (known: %v)", name, StarterNames())
	}
	key, err := s.key(name, rec, backend)
	if err != nil {
		return "", nil, err
	}
	js, err := json.Marshal(key)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(js)
	root, err := CacheDir()
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(root, "models", name+"-"+hex.EncodeToString(sum[:8])), js, nil
}

// buildStarter trains starting model s on rec's task with stx's own SFT recipe and leaves
// its weights (Hugging Face layout) in out.
func buildStarter(ctx context.Context, s starter, rec *schema.Recipe, backendSpec, out string) error {
	work := out + ".work"
	defer os.RemoveAll(work)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	src := s.Base
	if s.Widen != nil {
		m, err := runtime.NewModel(*s.Widen, sourceSeed(rec.Knobs))
		if err != nil {
			return err
		}
		src = filepath.Join(work, "init")
		if err := m.SaveHF(src, 0); err != nil {
			return err
		}
	}
	text, err := starterRecipe(s, rec, src)
	if err != nil {
		return err
	}
	cat, err := Load(nil, schema.Options{Builtin: []byte(text), Dir: work, Only: "starter"})
	if err != nil {
		return fmt.Errorf("starting-model recipe: %w", err)
	}
	res, err := Run(ctx, cat, "starter", RunOptions{RunsDir: filepath.Join(work, "runs"), Backend: backendSpec,
		NoEvalBefore: true, Out: io.Discard})
	if err != nil {
		return fmt.Errorf("starting-model SFT: %w", err)
	}
	if res.Interrupted {
		return errors.New("starting-model SFT interrupted")
	}
	cps, err := filepath.Glob(filepath.Join(res.Dir, "checkpoints", "[0-9]*", "policy"))
	if err != nil || len(cps) == 0 {
		return fmt.Errorf("starting-model SFT wrote no checkpoint in %s", res.Dir)
	}
	sort.Strings(cps)
	m, err := runtime.LoadModel(cps[len(cps)-1])
	if err != nil {
		return err
	}
	return m.SaveHF(out, 0)
}

// starterRecipe is the SFT recipe that trains a starting model from src on rec's task.
func starterRecipe(s starter, rec *schema.Recipe, src string) (string, error) {
	k := rec.Knobs
	task := rec.Task
	task.RewardRole = ""
	task.Workflow = nil
	task.Reward = []schema.Reward{}
	for _, p := range []*string{&task.Path, &task.ValidationPath} {
		if *p != "" && !hub.IsPath(*p) {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return "", err
			}
			*p = abs
		}
	}
	if _, err := tasks.NewFor(task, k); err != nil {
		return "", fmt.Errorf("task %s: %w", task.Name, err)
	}
	tj, err := json.Marshal(task)
	if err != nil {
		return "", err
	}
	sj, err := json.Marshal(src)
	if err != nil {
		return "", err
	}
	oj, err := json.Marshal(k.TaskOps)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`package stx

recipes: starter: {
	roles: [{name: "policy", specialization: "sft", model: source: %s}]
	syncs: []
	task: %s
	knobs: {
		seed:                 %d
		task_digits:          %d
		task_ops:             %s
		max_prompt_tokens:    %d
		num_rollout:          %d
		rollout_batch_size:   %d
		n_samples_per_prompt: 1
		micro_batch_size:     %d
		lr:                   %g
		lr_schedule:          "constant"
		eval_every:           0
		eval_before_train:    false
		save_every:           0
		keep_checkpoints:     1
	}
}
`, sj, tj, k.Seed, k.TaskDigits, oj, k.MaxPromptTokens, s.Steps, s.Batch, s.Batch, s.LR), nil
}
