// Package specializations is the role branch: how a role turns rollout data
// into micro-batches, what its model outputs and which loss it minimises.
// An algorithm is a specialization plus a recipe, never a switch on a role's
// name.
//
// Each specialization's file registers its own Contract (there is no
// central list): the data keys its role's batch needs (Requires) and the
// keys it can compute forward-only for other roles (Produces), both named
// by package rollout, and capability flags (Estimator, Teacher, ValueHead,
// TeacherBatches, CandidateActions, ...) that the engine reads instead of
// the specialization's name; the implementations are unexported, reached
// through the registry and the Specialization interface. `stx vet` checks a recipe's data flow against these contracts
// before any tensor is allocated. Contract.New builds the implementation: a
// Specialization turns rollout rows into micro-batches (PrepareBatch), says
// what its model outputs inside the compiled graph (ExtractModelOutput) and
// builds its loss (ComputeLoss, with the loss_agg_mode Reducer); the losses
// themselves are in the loss sub-package. Language-model specializations (LM)
// run a runtime.Model, the flow ones (Flow) a runtime.VelocityModel; both
// train through runtime.Trainer. A frozen role runs the same
// specialization forward-only (Producer) to produce its keys for syncs.
package specializations

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
)

// DataKind names the shape of data a specialization trains on. What a kind
// means to a run (the keys its rollouts provide, how rows pair into examples,
// how rollouts are built, which metric reports progress) is the engine's
// descriptor of that name (engine/datakind.go): a new kind is one descriptor.
type DataKind string

// The data kinds of the built-in specializations.
const (
	DataRL         DataKind = "rl"         // sampled completions scored by rewards
	DataSFT        DataKind = "sft"        // prompt/completion pairs
	DataPreference DataKind = "preference" // prompt/chosen/rejected
	DataKTO        DataKind = "kto"        // prompt/completion/label
	DataFlow       DataKind = "flow"       // continuous samples
	DataFlowRL     DataKind = "flow_rl"    // sampled SDE trajectories with rewards
	DataImitation  DataKind = "imitation"  // student rollouts with teacher-executed ones mixed in
)

// RoleConfig is what a contract may depend on: the role and its recipe's knobs.
type RoleConfig struct {
	Role  schema.Role
	Knobs schema.Knobs
}

// Contract is a specialization's static description.
type Contract struct {
	// Name the specialization is registered and selected under.
	Name string
	// Doc is one line naming the loss and the paper it comes from.
	Doc string
	// Data is the kind of data the role trains on.
	Data DataKind
	// Requires lists every key the role's batch must hold.
	Requires func(RoleConfig) []string
	// Produces lists the keys the role computes forward-only: for its own
	// batch and for syncs to other roles.
	Produces func(RoleConfig) []string
	// Estimator is true when the specialization computes advantages through
	// the estimators registry (knobs.estimator / estimator_map): the static
	// statement `stx vet` reads of an implementation that is an
	// AdvantageComputer (New refuses one that disagrees).
	Estimator bool
	// Teacher is true when its rollouts need a frozen teacher role, named by
	// the role's init.teacher.
	Teacher bool
	// TeacherReward is true for a Teacher specialization that follows the
	// teacher's reward-to-go of candidate actions rather than its
	// distribution (AggreVaTe): its progress shows in task accuracy, not in
	// the KL to the teacher.
	TeacherReward bool
	// ValueHead is true when the role's model carries a scalar head
	// (runtime.Model.AddValueHead) that its outputs are read from: values or
	// rewards rather than token distributions.
	ValueHead bool
	// TeacherBatches is true when a share 1 − gkd_lambda of the rollouts are
	// sampled by the teacher (init.teacher) rather than by the role itself
	// (GKD): its data is not on-policy, so it cannot drive task.workflow
	// episodes.
	TeacherBatches bool
	// CandidateActions is true when each rollout state (a prompt plus a prefix
	// of a student completion) gets aggrevate_candidates candidate next
	// tokens, each completed by the teacher and scored by the task: the rows
	// of a state train together (AggreVaTe).
	CandidateActions bool
	// TISCap is true for a loss that knobs.tis_cap corrects (token-level
	// policy gradients over the sampler's tokens): the role then also requires
	// its own log-probs before the step (old_logp). A recipe that sets tis_cap
	// with no such trainable role is refused.
	TISCap bool
	// New builds the specialization for a role; nil for a contract registered
	// only so that `stx vet` can check recipes that use it.
	New func(RoleConfig) (Specialization, error)
}

// registry holds every contract by name; guarded so that users may register
// their own specializations from any goroutine.
var registry = struct {
	sync.RWMutex
	byName map[string]Contract
}{byName: map[string]Contract{}}

// Register adds a specialization's contract. An empty or taken name is an error.
func Register(c Contract) error {
	if strings.TrimSpace(c.Name) == "" {
		return fmt.Errorf("register specialization: empty name")
	}
	if c.Requires == nil || c.Produces == nil {
		return fmt.Errorf("register specialization %q: Requires and Produces are required", c.Name)
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.byName[c.Name]; ok {
		return fmt.Errorf("register specialization: %q is already registered", c.Name)
	}
	registry.byName[c.Name] = c
	return nil
}

// MustRegister is Register for package initialisation.
func MustRegister(c Contract) {
	if err := Register(c); err != nil {
		panic(err)
	}
}

// Get returns the contract registered under name; an unknown name is an
// error that lists the known ones.
func Get(name string) (Contract, error) {
	registry.RLock()
	c, ok := registry.byName[name]
	registry.RUnlock()
	if !ok {
		return Contract{}, fmt.Errorf("unknown specialization %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return c, nil
}

// Names lists the registered specializations, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.byName))
	for n := range registry.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// keys builds a sorted, de-duplicated key list.
func keys(ks ...string) []string {
	out := slices.Clone(ks)
	sort.Strings(out)
	return slices.Compact(out)
}

// lmForward are the forward inputs of a language-model role: all that a
// frozen one (runs forward only, to produce its keys for syncs) needs.
var lmForward = []string{rollout.KeyTokens, rollout.KeyLossMask}

// trainOnly returns forward inputs for a frozen role, else the full list.
func trainOnly(cfg RoleConfig, forward []string, full ...string) []string {
	if !cfg.Role.Trainable {
		return keys(forward...)
	}
	return keys(append(append([]string(nil), forward...), full...)...)
}

// withRef adds ref_log_probs to what a role produces when it keeps an
// in-role frozen reference.
func withRef(cfg RoleConfig, ks ...string) []string {
	if cfg.Role.InitBool("with_ref") {
		ks = append(ks, rollout.KeyRefLogProbs)
	}
	return keys(ks...)
}
