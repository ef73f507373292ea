package tasks

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"stx.dev/stx/schema"
)

// Default split sizes, the schema's defaults, used when a task section
// built in Go leaves them zero.
const (
	DefaultTrainSize      = 2000
	DefaultValidationSize = 200
)

// Factory builds a task from a recipe's task section and the run's knobs
// (the seed, and the task_* knobs that set a synthetic task's difficulty).
type Factory func(t schema.Task, k schema.Knobs) (Task, error)

// registry maps task names to factories. It is the package's only mutable
// global, guarded by mu.
var (
	mu       sync.RWMutex
	registry = map[string]Factory{}
)

func init() {
	for name, f := range map[string]Factory{
		"arithmetic": func(t schema.Task, k schema.Knobs) (Task, error) {
			// Zero knobs (a Knobs built in Go) take ArithmeticConfig's defaults.
			return NewArithmetic(ArithmeticConfig{Digits: k.TaskDigits, Ops: k.TaskOps}, t.TrainSize, t.ValidationSize, k.Seed)
		},
		"sorting": func(t schema.Task, k schema.Knobs) (Task, error) {
			return NewSorting(SortingConfig{}, t.TrainSize, t.ValidationSize, k.Seed)
		},
		"reverse": func(t schema.Task, k schema.Knobs) (Task, error) {
			return NewReverse(ReverseConfig{}, t.TrainSize, t.ValidationSize, k.Seed)
		},
		"mixture2d": func(t schema.Task, k schema.Knobs) (Task, error) {
			return NewMixture2D(MixtureConfig{}, t.TrainSize, t.ValidationSize, k.Seed)
		},
		"jsonl":   newDatasetFactory("jsonl"),
		"json":    newDatasetFactory("json"),
		"parquet": newDatasetFactory("parquet"),
	} {
		if err := Register(name, f); err != nil {
			panic(err)
		}
	}
}

// Register adds a task factory under name. Names are unique and non-empty.
func Register(name string, f Factory) error {
	if name == "" {
		return errors.New("tasks: register: empty task name")
	}
	if f == nil {
		return fmt.Errorf("tasks: register %q: nil factory", name)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		return fmt.Errorf("tasks: register %q: already registered", name)
	}
	registry[name] = f
	return nil
}

// Names returns the registered task names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewFor builds the task a recipe's task section names with the run's knobs:
// the seed and the task_* difficulty knobs (zero values take the task's
// defaults). Zero split sizes take the schema defaults; negative ones are errors.
func NewFor(t schema.Task, k schema.Knobs) (Task, error) {
	mu.RLock()
	f, ok := registry[t.Name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown task %q (known: %s)", t.Name, strings.Join(Names(), ", "))
	}
	if t.TrainSize < 0 || t.ValidationSize < 0 {
		return nil, fmt.Errorf("task %q: negative split size (train_size %d, validation_size %d)",
			t.Name, t.TrainSize, t.ValidationSize)
	}
	if t.TrainSize == 0 {
		t.TrainSize = DefaultTrainSize
	}
	if t.ValidationSize == 0 {
		t.ValidationSize = DefaultValidationSize
	}
	task, err := f(t, k)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", t.Name, err)
	}
	return task, nil
}

// Probe checks a synthetic task's configuration as NewFor would and returns
// it built with one example per split: `stx vet` checks every recipe this
// way without drawing thousands of prompts for each. The splits' sizes are
// checked against the distinct prompts the configuration can generate,
// with NewFor's error.
func Probe(t schema.Task, k schema.Knobs) (Task, error) {
	small := t
	small.TrainSize, small.ValidationSize = 1, 1
	if t.TrainSize < 0 || t.ValidationSize < 0 {
		small = t // NewFor's error
	}
	task, err := NewFor(small, k)
	if err != nil {
		return nil, err
	}
	if tt, ok := task.(*textTask); ok {
		train, val := t.TrainSize, t.ValidationSize
		if train == 0 {
			train = DefaultTrainSize
		}
		if val == 0 {
			val = DefaultValidationSize
		}
		if uint64(train)+uint64(val) > tt.capacity {
			return nil, fmt.Errorf("task %q: %w", t.Name, sizeError(tt.name, train, val, tt.capacity))
		}
	}
	return task, nil
}
