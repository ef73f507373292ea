package engine

import (
	"fmt"
	"sort"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// dataKind is everything the engine asks of a kind of training data (a specialization's
// Contract.Data): the keys its rollouts provide, how rows group into examples, how many a
// rollout holds, how rollouts are built and which metric reports progress. The engine asks
// the descriptor and never switches on the kind's name, so a new kind of data is one
// descriptor (registerDataKind) beside the strategy that generates it.
type dataKind struct {
	// keys are the data keys a rollout of this kind provides (vet checks roles' Requires
	// against them, with what roles produce and syncs inject).
	keys []string
	// examples is the shape of task records the kind reads ("" for none): every record
	// is checked against it before any model is built.
	examples tasks.Kind
	// unit is the number of consecutive rows that make one example and train together
	// (2: a preference pair); micro_batch_size counts units.
	unit int
	// wholeRollout: the rollout trains in one optimizer step (KTO's mismatched rows must
	// share a step with their examples).
	wholeRollout bool
	// velocity: roles train a velocity model (runtime.VelocityModel), not a language model.
	velocity bool
	// rewarded: rollouts are sampled and scored by the task's reward (reward metrics).
	rewarded bool
	// groups: rows are groups of completions sampled per prompt, which the rejection and
	// dynamic-sampling knobs act on.
	groups bool
	// episodes: the role samples its own completions, so task.workflow episodes can take
	// their place.
	episodes bool
	// rows is the number of rows a rollout holds before rejection (0: one step, whatever
	// it holds); a task.workflow's turns multiply it (loop.expectedRows).
	rows func(k schema.Knobs) int
	// drawn is the number of task examples a rollout draws (0: none), for total_epochs.
	drawn func(k schema.Knobs) int
	// objective is the metric that reports a trainable role's progress; p is the role's
	// metric prefix ("policy/"). nil: validation accuracy.
	objective func(p string) Objective
	// strategy builds the rollouts of a role with contract c (rollout_*.go).
	strategy func(c specializations.Contract, k schema.Knobs, needs estimators.Needs) strategy
}

// dataKinds are the registered descriptors by name.
var dataKinds = map[specializations.DataKind]dataKind{}

// registerDataKind adds the descriptor of kind name; a kind registered twice is a
// programming error.
func registerDataKind(name specializations.DataKind, d dataKind) {
	if _, dup := dataKinds[name]; dup {
		panic(fmt.Sprintf("data kind %q registered twice", name))
	}
	if d.unit == 0 {
		d.unit = 1
	}
	dataKinds[name] = d
}

// kindOf is the descriptor of kind name; an unregistered kind gets one whose rollouts fail
// with the reason, which provides no keys (vet names what is missing), and whose rollouts
// are planned as one sample per drawn example.
func kindOf(name specializations.DataKind) dataKind {
	if d, ok := dataKinds[name]; ok {
		return d
	}
	return dataKind{unit: 1, rows: perSample, drawn: perExample,
		strategy: func(specializations.Contract, schema.Knobs, estimators.Needs) strategy {
			return unsupported{kind: name}
		}}
}

// dataKindNames lists the registered kinds, sorted (tests, messages).
func dataKindNames() []string {
	out := make([]string, 0, len(dataKinds))
	for k := range dataKinds {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

// The shared pieces of the built-in descriptors.
var (
	lmKeys     = []string{rollout.KeyTokens, rollout.KeyLossMask}
	perExample = func(k schema.Knobs) int { return k.RolloutBatchSize }
	perSample  = func(k schema.Knobs) int { return k.RolloutBatchSize * max(k.NSamplesPerPrompt, 1) }
	// trainingMetric is a role's per-step training metric, averaged over objectiveWindow steps.
	trainingMetric = func(name, metric string, lower, withAccuracy bool) func(string) Objective {
		return func(p string) Objective {
			return Objective{Name: name, Key: p + metric, Window: objectiveWindow, Lower: lower, WithAccuracy: withAccuracy}
		}
	}
)

// onPolicyStrategy samples completions of the role's prompts, completed by own unless the
// contract says otherwise: candidate actions of each state (AggreVaTe), teacher-sampled
// batches (GKD).
func onPolicyStrategy(own sampling) func(specializations.Contract, schema.Knobs, estimators.Needs) strategy {
	return func(c specializations.Contract, k schema.Knobs, needs estimators.Needs) strategy {
		if c.CandidateActions {
			return candidateActions{k: max(k.AggrevateCandidates, 1)}
		}
		s := onPolicy{sampling: own, greedyBaseline: needs.GreedyBaseline}
		if c.TeacherBatches {
			s.sampling = teacherBatches{}
		}
		return s
	}
}

// offlineStrategy reads the task's records of shape kind as they are.
func offlineStrategy(kind tasks.Kind) func(specializations.Contract, schema.Knobs, estimators.Needs) strategy {
	return func(specializations.Contract, schema.Knobs, estimators.Needs) strategy { return offline{kind: kind} }
}

func init() {
	rl := []string{rollout.KeyTokens, rollout.KeyLossMask, rollout.KeyRewards, rollout.KeySamplerLogProbs}
	registerDataKind(specializations.DataRL, dataKind{keys: rl, examples: tasks.KindRL,
		rewarded: true, groups: true, episodes: true, rows: perSample, drawn: perExample, strategy: onPolicyStrategy(studentSamples{})})
	registerDataKind(specializations.DataImitation, dataKind{keys: append(rl[:len(rl):len(rl)], rollout.KeyExecutedBy),
		examples: tasks.KindRL, rewarded: true, groups: true, rows: perSample, drawn: perExample, strategy: onPolicyStrategy(teacherRows{})})
	registerDataKind(specializations.DataSFT, dataKind{keys: lmKeys, examples: tasks.KindSFT,
		rows: perExample, drawn: perExample, strategy: offlineStrategy(tasks.KindSFT),
		objective: trainingMetric("loss", "loss", true, true)})
	registerDataKind(specializations.DataPreference, dataKind{keys: append(lmKeys[:2:2], rollout.KeyChosen),
		examples: tasks.KindPreference, unit: 2,
		rows: func(k schema.Knobs) int { return 2 * k.RolloutBatchSize }, drawn: perExample,
		strategy: offlineStrategy(tasks.KindPreference), objective: trainingMetric("preference accuracy", "accuracy", false, false)})
	registerDataKind(specializations.DataKTO, dataKind{keys: append(lmKeys[:2:2], rollout.KeyLabel),
		examples: tasks.KindKTO, wholeRollout: true,
		rows: func(schema.Knobs) int { return 0 }, drawn: perExample,
		strategy: offlineStrategy(tasks.KindKTO), objective: trainingMetric("label accuracy", "accuracy", false, false)})
	registerDataKind(specializations.DataFlow, dataKind{keys: []string{rollout.KeySamples}, examples: tasks.KindFlow,
		velocity: true, rows: perSample, drawn: perSample,
		strategy:  func(specializations.Contract, schema.Knobs, estimators.Needs) strategy { return flowPoints{} },
		objective: trainingMetric("loss", "loss", true, false)})
	registerDataKind(specializations.DataFlowRL, dataKind{
		keys:     []string{rollout.KeyTrajectories, rollout.KeyRewards, rollout.KeySamplerLogProbs},
		examples: tasks.KindFlow, velocity: true, rewarded: true,
		rows:      func(k schema.Knobs) int { return perSample(k) * max(k.FlowSteps, 1) },
		drawn:     func(schema.Knobs) int { return 0 }, // the flow sampler draws no examples
		strategy:  func(specializations.Contract, schema.Knobs, estimators.Needs) strategy { return flowTrajectories{} },
		objective: func(string) Objective { return Objective{Name: "val reward", Key: "val/reward_mean"} }})
}
