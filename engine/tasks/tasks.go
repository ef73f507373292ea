// Package tasks holds the data stx trains on and the reward functions that
// score completions: the built-in synthetic tasks (arithmetic, sorting,
// reverse: small text problems a byte-level model can learn; mixture2d:
// 2-D points for the flow-matching recipes), datasets in JSONL, JSON and
// Parquet with chat or plain-text prompts, a registry the engine closes the
// schema's #TaskName over, and the weighted reward functions of a recipe's
// task section: built-in checks (exact_match, numeric_match, math answer
// verification for GSM8K- and MATH-style data, contains, regex, format,
// think_format, length_penalty) and external scorers (a command or an
// HTTP endpoint, scoring whole batches).
//
// The registered tasks (NewFor builds them from a recipe's task section and
// knobs):
//
//   - arithmetic: "12+7=" → "19" (ArithmeticConfig, set by the task_digits
//     and task_ops knobs; default reward numeric_match);
//   - sorting: "sort 3 1 2:" → "1 2 3" (SortingConfig; exact_match);
//   - reverse: "reverse abc:" → "cba" (ReverseConfig; exact_match);
//   - mixture2d: 2-D points of a Gaussian mixture (MixtureConfig; reward
//     Mixture.ScorePoint);
//   - jsonl, json, parquet: the records of task.path in that format
//     (task.columns names the fields),
//     validated against task.validation_path or a seeded validation_split
//     (10%) of the prompts; train_size and validation_size do not apply
//     (every record is used).
//
// Synthetic splits are sized by train_size and validation_size, drawn from
// the run's seed, and disjoint: no validation prompt appears in train.
// Every split is deterministic: the same task section and seed give the
// same examples in the same order.
package tasks

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"stx.dev/stx/schema"
)

// Kind is a shape of training data a task can serve.
type Kind string

// The data kinds. A recipe's specializations need one of them; a task
// declares which it serves (Task.Kinds).
const (
	// KindRL is prompt + reference answer, scored by reward functions.
	KindRL Kind = "rl"
	// KindSFT is prompt + completion (Example.Answer) to imitate.
	KindSFT Kind = "sft"
	// KindPreference is prompt + chosen + rejected completions.
	KindPreference Kind = "preference"
	// KindKTO is prompt + completion (Example.Answer) + desirability label.
	KindKTO Kind = "kto"
	// KindFlow is continuous points (Example.Point) for flow matching.
	KindFlow Kind = "flow"
)

// textKinds are the kinds every synthetic text task serves.
var textKinds = []Kind{KindRL, KindSFT, KindPreference, KindKTO}

// Example is one item of a task split. Which fields are set depends on the
// data kind (see ForKind):
//
//   - RL: Prompt, Answer (the reference answer rewards compare against);
//   - SFT: Prompt, Answer (the completion to imitate);
//   - preference: Prompt, Chosen, Rejected;
//   - KTO: Prompt, Answer (the completion), Label with HasLabel set;
//   - flow: Point.
//
// Synthetic text tasks fill Answer, Chosen (= Answer) and Rejected (a
// plausible wrong answer) on every example, so one split serves RL, SFT and
// preference recipes directly; ForKind derives the KTO view from them.
type Example struct {
	// ID is the stable task id: group estimators group the samples of one
	// prompt instance by it. Unique within a synthetic split; for JSONL the
	// record's "id" or a hash of the prompt.
	ID string
	// Prompt is the text the model continues.
	Prompt string
	// Answer is the reference answer (RL) or the completion (SFT, KTO).
	Answer string
	// Chosen and Rejected are the preferred and dispreferred completions.
	Chosen, Rejected string
	// Label is the KTO desirability of Answer; meaningful when HasLabel.
	Label, HasLabel bool
	// DataSource names where the example comes from (metrics per source):
	// the task name, or a JSONL record's "data_source".
	DataSource string
	// Point is a data point of a continuous task (mixture2d: 2 values).
	Point []float32
	// Messages is the prompt as chat messages when the dataset gave it so;
	// Prompt is then their rendering (PlainRenderer until the engine
	// renders them with the model's chat template, RenderPrompts).
	Messages []Message
	// Metadata is the record's metadata field as JSON, passed to external
	// rewards (nil when absent).
	Metadata json.RawMessage
	// Origin is where a dataset record was read ("data.jsonl:7",
	// "data.json:12: record [3]", "data.parquet: row 5"), for errors about it
	// found after loading; "" for synthetic examples.
	Origin string
	// idGiven tells that ID is the record's own id field, not a hash of
	// its prompt: two records must not share one.
	idGiven bool
}

// at prefixes an error about ex with its origin ("data.jsonl:7: ").
func (ex Example) at() string {
	if ex.Origin == "" {
		return ""
	}
	return ex.Origin + ": "
}

// uniqueIDs refuses two records of a dataset file with one id field: group
// estimators group samples by id, so they would share one group.
func uniqueIDs(exs []Example) error {
	seen := map[string]string{}
	for _, ex := range exs {
		if !ex.idGiven {
			continue
		}
		if o, dup := seen[ex.ID]; dup {
			return fmt.Errorf("%sid %q repeats the id of %s: each record needs its own (or no id field: ids are then hashes of the prompts)", ex.at(), ex.ID, o)
		}
		seen[ex.ID] = ex.Origin
	}
	return nil
}

// Task is a named dataset with seeded train and validation splits.
type Task interface {
	// Name is the registered task name.
	Name() string
	// Kinds are the data kinds the task serves.
	Kinds() []Kind
	// Train returns the training split (a fresh slice each call).
	Train() []Example
	// Validation returns the held-out split (a fresh slice each call).
	Validation() []Example
}

// Rewarded is implemented by text tasks whose completions have a default
// reward: the term NewReward uses when a recipe lists none, and the test
// behind the "correct" flag of every reward.
type Rewarded interface {
	DefaultReward() schema.Reward
}

// PointScorer is implemented by continuous tasks: it scores one generated
// point (the Flow-GRPO reward). It fails on a point of the wrong dimension.
type PointScorer interface {
	ScorePoint(p []float32) (reward float64, correct bool, err error)
}

// ForKind returns the examples shaped for data kind k, or an error naming
// the first example that cannot serve it:
//
//   - RL needs an Answer and no KTO label (a labelled completion is not a
//     reference answer);
//   - SFT needs an Answer (or a Chosen completion, which becomes the
//     Answer) and refuses undesirable KTO completions;
//   - preference needs Chosen and Rejected;
//   - KTO keeps labelled examples as they are and turns an unlabelled
//     chosen/rejected pair into one labelled completion: the chosen one
//     (desirable) or the rejected one (undesirable), picked by a hash of the
//     example's ID and prompt, so a split gets a deterministic mix of about
//     half of each while keeping one example per prompt;
//   - flow needs a Point.
//
// The input is not modified.
func ForKind(exs []Example, k Kind) ([]Example, error) {
	out := make([]Example, len(exs))
	for i, ex := range exs {
		switch k {
		case KindRL:
			if ex.HasLabel {
				return nil, fmt.Errorf("%sexample %q: a KTO-labelled completion is not a reference answer for %s", ex.at(), ex.ID, k)
			}
			if ex.Answer == "" {
				return nil, fmt.Errorf("%sexample %q has no answer for %s", ex.at(), ex.ID, k)
			}
		case KindSFT:
			if ex.HasLabel && !ex.Label {
				return nil, fmt.Errorf("%sexample %q is an undesirable completion, not an %s target", ex.at(), ex.ID, k)
			}
			if ex.Answer == "" {
				ex.Answer = ex.Chosen
			}
			if ex.Answer == "" {
				return nil, fmt.Errorf("%sexample %q has no completion for %s", ex.at(), ex.ID, k)
			}
		case KindPreference:
			if ex.Chosen == "" || ex.Rejected == "" {
				return nil, fmt.Errorf("%sexample %q has no chosen/rejected pair for %s", ex.at(), ex.ID, k)
			}
		case KindKTO:
			if !ex.HasLabel {
				if ex.Chosen == "" || ex.Rejected == "" {
					return nil, fmt.Errorf("%sexample %q has neither a KTO label nor a chosen/rejected pair", ex.at(), ex.ID)
				}
				ex.HasLabel = true
				ex.Label = hash64(ex.ID, ex.Prompt)&1 == 0
				if ex.Label {
					ex.Answer = ex.Chosen
				} else {
					ex.Answer = ex.Rejected
				}
			}
		case KindFlow:
			if len(ex.Point) == 0 {
				return nil, fmt.Errorf("%sexample %q has no point for %s", ex.at(), ex.ID, k)
			}
		default:
			return nil, fmt.Errorf("unknown data kind %q (known: %s, %s, %s, %s, %s)",
				k, KindRL, KindSFT, KindPreference, KindKTO, KindFlow)
		}
		out[i] = ex
	}
	return out, nil
}

// hash64 is a platform-independent hash of its parts (SHA-256, first 8
// bytes), used where a choice must be stable across runs and machines.
func hash64(parts ...string) uint64 {
	h := sha256.New()
	for _, p := range parts {
		// Length-prefix each part so ("ab","c") and ("a","bc") differ.
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return binary.LittleEndian.Uint64(h.Sum(nil)[:8])
}

// promptID is the ID of a record without one: a stable hash of the prompt.
func promptID(prompt string) string {
	sum := sha256.Sum256([]byte(prompt))
	return "p" + hex.EncodeToString(sum[:8])
}
