package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"stx.dev/stx/estimators"
	"stx.dev/stx/rollout"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// Node is a role bound to its specialization's contract.
type Node struct {
	Role     schema.Role
	Contract specializations.Contract
	// Requires and Produces are the contract's keys for this role.
	Requires []string
	Produces []string
}

// Graph is a recipe's roles, the data flowing between them and the order
// things run in.
type Graph struct {
	Recipe *schema.Recipe
	Nodes  []Node
	// Syncs are the inject syncs in dependency order: a role's inputs are
	// synced before the role produces keys for others.
	Syncs []schema.Sync
	// Pools lists the roles of each pool, in recipe order; roles in one
	// pool run one after another, pools run concurrently.
	Pools []Pool
}

// Pool is a set of roles that share workers.
type Pool struct {
	Name  string
	Roles []string
}

// Node returns the node of a role.
func (g *Graph) Node(role string) (Node, bool) {
	for _, n := range g.Nodes {
		if n.Role.Name == role {
			return n, true
		}
	}
	return Node{}, false
}

// Problem is a graph-level mistake in a recipe, at a path relative to it.
type Problem struct {
	Path string
	Msg  string
	// Factors, for a product of knobs that is too large, are the paths of
	// its factors (Path is the last): the one to blame is the one the user
	// set (schema.Catalog.FactorPath).
	Factors []string
}

// BuildGraph binds a recipe's roles to their specializations and checks the
// data flow. It returns every problem found; the graph is usable only when
// there are none.
func BuildGraph(r *schema.Recipe) (*Graph, []Problem) {
	c := newGraphCheck(r)
	c.bindRoles()
	c.checkSyncs()
	c.checkRequiredKeys()
	c.checkRoleKnobs()
	g, probs := c.g, c.probs
	probs = append(probs, tokenBounds(g)...)
	probs = append(probs, placementProblems(r, g)...)
	g.Pools = poolsOf(r)
	probs = append(probs, workflowProblems(r, g)...)
	probs = append(probs, knobProblems(r, g)...)
	probs = append(probs, rolloutEngineProblems(r, g)...) // graph_rollout.go
	return g, probs
}

// graphCheck is BuildGraph's state: the graph so far, the problems found and the
// lookups the checks share.
type graphCheck struct {
	r         *schema.Recipe
	g         *Graph
	probs     []Problem
	roleNames []string
	index     map[string]int  // role name → index in r.Roles
	nodeOf    map[string]Node // role name → its node (roles with a known specialization)
	provided  map[string][]string
}

func newGraphCheck(r *schema.Recipe) *graphCheck {
	c := &graphCheck{r: r, g: &Graph{Recipe: r}, roleNames: make([]string, len(r.Roles)), index: map[string]int{},
		nodeOf: map[string]Node{}, provided: map[string][]string{}}
	for i, role := range r.Roles {
		c.roleNames[i] = role.Name
		c.index[role.Name] = i
	}
	return c
}

func (c *graphCheck) add(path, format string, args ...any) {
	c.probs = append(c.probs, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// known reports whether name is a role of the recipe, adding a problem at path if not.
func (c *graphCheck) known(path, what, name string) bool {
	if _, ok := c.index[name]; ok {
		return true
	}
	c.add(path, "%s %q is not a role of this recipe (roles: %s)%s", what, name, strings.Join(c.roleNames, ", "), hint(name, c.roleNames))
	return false
}

// bindRoles binds each role to its contract and checks what the role names: its
// initialisation source and its teacher.
func (c *graphCheck) bindRoles() {
	for i, role := range c.r.Roles {
		ct, err := specializations.Get(role.Specialization)
		if err != nil {
			c.add(fmt.Sprintf("roles[%d].specialization", i), "%v", err)
			continue
		}
		cfg := specializations.RoleConfig{Role: role, Knobs: c.r.Knobs}
		n := Node{Role: role, Contract: ct, Requires: ct.Requires(cfg), Produces: ct.Produces(cfg)}
		c.g.Nodes = append(c.g.Nodes, n)
		c.nodeOf[role.Name] = n
		if role.SyncToRollout && !role.Trainable {
			c.add(fmt.Sprintf("roles[%d].sync_to_rollout", i), "role %q pushes weights to the rollout sampler but is not trainable: its weights never change", role.Name)
		}
		if from := role.Model.InitFrom; from != "" {
			if from == role.Name {
				c.add(fmt.Sprintf("roles[%d].model.init_from", i), "role %q cannot be initialised from itself", role.Name)
			} else {
				c.known(fmt.Sprintf("roles[%d].model.init_from", i), "init_from", from)
			}
		}
		teacher := role.InitString("teacher")
		if ct.Teacher && teacher == "" && role.Trainable {
			c.add(fmt.Sprintf("roles[%d].init", i), "specialization %q needs a frozen teacher role: set init: teacher: \"<role>\"", ct.Name)
		}
		if teacher != "" && c.known(fmt.Sprintf("roles[%d].init.teacher", i), "teacher", teacher) {
			if teacher == role.Name {
				c.add(fmt.Sprintf("roles[%d].init.teacher", i), "role %q cannot be its own teacher", role.Name)
			} else if c.r.Roles[c.index[teacher]].Trainable {
				c.add(fmt.Sprintf("roles[%d].init.teacher", i), "teacher %q is trainable; a teacher must be frozen (trainable: false)", teacher)
			}
		}
	}
}

// checkSyncs checks the syncs' endpoints, produced keys and row alignment, and orders the
// inject syncs.
func (c *graphCheck) checkSyncs() {
	for i, s := range c.r.Syncs {
		okS := c.known(fmt.Sprintf("syncs[%d].source", i), "sync source", s.Source)
		okT := c.known(fmt.Sprintf("syncs[%d].target", i), "sync target", s.Target)
		if okT {
			// Count the keys as provided even when the sync is broken, so
			// that one mistake is not reported twice.
			c.provided[s.Target] = append(c.provided[s.Target], s.TargetKeys...)
		}
		if !okS || !okT {
			continue
		}
		if s.Source == s.Target {
			c.add(fmt.Sprintf("syncs[%d].target", i), "sync from role %q to itself", s.Source)
			continue
		}
		src, okS := c.nodeOf[s.Source]
		dst, okT := c.nodeOf[s.Target]
		if !okS || !okT {
			continue // unknown specialization, reported above
		}
		for j, k := range s.Keys {
			if !slices.Contains(src.Produces, k) {
				c.add(fmt.Sprintf("syncs[%d].keys[%d]", i, j), "role %q (specialization %s) does not produce key %q (it produces: %s)%s",
					s.Source, src.Contract.Name, k, strings.Join(src.Produces, ", "), hint(k, src.Produces))
			}
		}
		if src.Contract.Data != dst.Contract.Data {
			c.add(fmt.Sprintf("syncs[%d]", i), "role %q trains on %s data but role %q on %s data; a sync pairs their rows one to one",
				s.Source, src.Contract.Data, s.Target, dst.Contract.Data)
		}
	}
	if order, cycle := syncOrder(c.r); cycle != nil {
		c.add(fmt.Sprintf("syncs[%d]", cycle[0]), "inject syncs form a cycle: %s", cycleString(c.r, cycle))
	} else {
		c.g.Syncs = order
	}
}

// checkRequiredKeys: every key a role requires has a provider (its data kind, the role
// itself, an inject sync).
func (c *graphCheck) checkRequiredKeys() {
	for i, role := range c.r.Roles {
		n, ok := c.nodeOf[role.Name]
		if !ok {
			continue
		}
		have := append(append(append([]string(nil), kindOf(n.Contract.Data).keys...), n.Produces...), c.provided[role.Name]...)
		for _, k := range n.Requires {
			if !slices.Contains(have, k) {
				c.add(fmt.Sprintf("roles[%d]", i), "role %q (specialization %s) requires key %q, which neither its %s data, nor the role itself, nor an inject sync provides%s",
					role.Name, n.Contract.Name, k, n.Contract.Data, keyHint(k, role.Name))
			}
		}
	}
}

// checkRoleKnobs checks the knobs that depend on roles: estimators, tis_cap,
// estimator_map, trainable roles, the reward role.
func (c *graphCheck) checkRoleKnobs() {
	trainable := 0
	for _, n := range c.g.Nodes {
		if n.Role.Trainable {
			trainable++
		}
		if !n.Contract.Estimator || !n.Role.Trainable {
			continue
		}
		if specializations.UsesPrecomputedAdvantages(specializations.RoleConfig{Role: n.Role, Knobs: c.r.Knobs}) {
			continue // its advantages are supplied (OPD's teacher gaps): no estimator runs
		}
		est := c.r.Knobs.EstimatorFor(n.Role.Name)
		path := "knobs.estimator"
		if _, ok := c.r.Knobs.EstimatorMap[n.Role.Name]; ok {
			path = "knobs.estimator_map." + n.Role.Name
		}
		if _, err := estimators.Get(est); err != nil {
			c.add(path, "%v", err)
			continue
		}
		if estimators.NeedsOf(est).Groups && c.r.Knobs.NSamplesPerPrompt < 2 {
			c.add("knobs.n_samples_per_prompt", "estimator %s of role %q needs groups: n_samples_per_prompt must be at least 2 (it is %d)", est, n.Role.Name, c.r.Knobs.NSamplesPerPrompt)
		}
	}
	if c.r.Knobs.TISCap != nil && !slices.ContainsFunc(c.g.Nodes, func(n Node) bool { return n.Role.Trainable && n.Contract.TISCap }) {
		// A knob that would do nothing is refused rather than silently ignored.
		c.add("knobs.tis_cap", "tis_cap corrects a policy-gradient loss over sampled tokens, and no trainable role has one (specializations actor, opd): remove tis_cap")
	}
	for _, role := range slices.Sorted(maps.Keys(c.r.Knobs.EstimatorMap)) {
		c.known("knobs.estimator_map."+role, "estimator_map key", role)
	}
	if trainable == 0 && !c.r.Knobs.EvalOnly && len(c.g.Nodes) == len(c.r.Roles) {
		c.add("roles", "no role is trainable (set knobs.eval_only: true to only evaluate)")
	}
	if rr := c.r.Task.RewardRole; rr != "" && c.known("task.reward_role", "reward_role", rr) {
		if n, ok := c.nodeOf[rr]; ok && !slices.Contains(n.Produces, rollout.KeyRewards) {
			c.add("task.reward_role", "reward role %q (specialization %s) does not produce rewards; use specialization reward_model", rr, n.Contract.Name)
		}
	}
}

// poolsOf lists the roles of each pool, pools in recipe order.
func poolsOf(r *schema.Recipe) []Pool {
	var pools []Pool
	for _, role := range r.Roles {
		i := slices.IndexFunc(pools, func(p Pool) bool { return p.Name == role.Pool })
		if i < 0 {
			pools = append(pools, Pool{Name: role.Pool})
			i = len(pools) - 1
		}
		pools[i].Roles = append(pools[i].Roles, role.Name)
	}
	return pools
}

// syncOrder sorts the inject syncs so that every sync into a role runs
// before the syncs out of it (Kahn's algorithm over roles). On a cycle it
// returns the indices of the syncs on it.
func syncOrder(r *schema.Recipe) ([]schema.Sync, []int) {
	// Syncs naming unknown roles or a role itself are reported elsewhere.
	valid := r.Syncs[:0:0]
	for _, s := range r.Syncs {
		if _, okS := r.Role(s.Source); okS && s.Source != s.Target {
			if _, okT := r.Role(s.Target); okT {
				valid = append(valid, s)
			}
		}
	}
	r = &schema.Recipe{Roles: r.Roles, Syncs: valid}
	in := map[string]int{}
	for _, s := range r.Syncs {
		in[s.Target]++
	}
	var ready []string
	for _, role := range r.Roles {
		if in[role.Name] == 0 {
			ready = append(ready, role.Name)
		}
	}
	done := make([]bool, len(r.Syncs))
	var order []schema.Sync
	for len(ready) > 0 {
		role := ready[0]
		ready = ready[1:]
		for i, s := range r.Syncs {
			if done[i] || s.Source != role {
				continue
			}
			done[i] = true
			order = append(order, s)
			if in[s.Target]--; in[s.Target] == 0 {
				ready = append(ready, s.Target)
			}
		}
	}
	if len(order) == len(r.Syncs) {
		return order, nil
	}
	// A sync that never ran has a blocked source: one of its incoming syncs
	// never ran either. Walking those backwards must revisit a role; the
	// syncs since that role form the cycle.
	i := slices.Index(done, false)
	var path []int
	at := map[string]int{}
	for {
		s := r.Syncs[i]
		if k, ok := at[s.Target]; ok {
			cycle := path[k:]
			sort.Ints(cycle)
			return nil, cycle
		}
		at[s.Target] = len(path)
		path = append(path, i)
		i = slices.IndexFunc(r.Syncs, func(p schema.Sync) bool { return p.Target == s.Source })
		for j, p := range r.Syncs {
			if !done[j] && p.Target == s.Source {
				i = j
				break
			}
		}
		if i < 0 {
			return nil, path // unreachable: a blocked role always has an incoming sync
		}
	}
}

func cycleString(r *schema.Recipe, cycle []int) string {
	parts := make([]string, 0, len(cycle))
	for _, i := range cycle {
		s := r.Syncs[i]
		parts = append(parts, fmt.Sprintf("%s → %s (syncs[%d])", s.Source, s.Target, i))
	}
	return strings.Join(parts, ", ")
}

func hint(s string, cands []string) string {
	if m := schema.Suggest(s, cands); m != "" {
		return fmt.Sprintf("; did you mean %q?", m)
	}
	return ""
}

// keyHint says how a missing key is usually provided.
func keyHint(key, role string) string {
	switch key {
	case rollout.KeyRefLogProbs:
		return fmt.Sprintf(`; set init: with_ref: true on role %q, or add a frozen reference role and {source: "reference", target: %q, keys: ["log_probs"], target_keys: ["ref_log_probs"]}`, role, role)
	case rollout.KeyValues:
		return fmt.Sprintf(`; GAE needs a value role: add {name: "value", specialization: %q} and {source: "value", target: %q, keys: ["values"]}`, producerOf(key), role)
	case rollout.KeyTeacherLogProbs:
		return fmt.Sprintf(`; add a frozen teacher role and {source: "teacher", target: %q, keys: ["log_probs"], target_keys: ["teacher_log_probs"]}`, role)
	case rollout.KeyTeacherLogits:
		return fmt.Sprintf(`; add a frozen teacher role and {source: "teacher", target: %q, keys: ["logits"], target_keys: ["teacher_logits"]}`, role)
	case rollout.KeyTeacherActions:
		return fmt.Sprintf(`; add a frozen teacher role and {source: "teacher", target: %q, keys: ["actions"], target_keys: ["teacher_actions"]}`, role)
	}
	return ""
}

// producerOf names the first registered specialization that produces key,
// for hints.
func producerOf(key string) string {
	for _, name := range specializations.Names() {
		c, err := specializations.Get(name)
		if err == nil && slices.Contains(c.Produces(specializations.RoleConfig{Role: schema.Role{Name: name, Trainable: true}}), key) {
			return name
		}
	}
	return ""
}

// Bounds of the token counts that size knobs multiply up to, far above any
// real run: past them a run would only fail later, out of memory.
const (
	maxRolloutTokens = 1 << 28 // tokens (prompt + completion) of one rollout
	maxMicroTokens   = 1 << 22 // tokens of one micro-batch
)

// tokenBounds checks what one rollout and one micro-batch would hold, for
// recipes whose roles train on token sequences.
func tokenBounds(g *Graph) []Problem {
	k := g.Recipe.Knobs
	tokens := slices.ContainsFunc(g.Nodes, func(n Node) bool {
		return !kindOf(n.Contract.Data).velocity
	})
	if !tokens {
		return nil
	}
	var probs []Problem
	seq := int64(k.MaxPromptTokens) + int64(k.MaxNewTokens)
	rows := int64(k.RolloutBatchSize) * int64(k.NSamplesPerPrompt)
	if tok := rows * seq; tok > maxRolloutTokens {
		probs = append(probs, Problem{Path: "knobs.max_new_tokens",
			Factors: []string{"knobs.rollout_batch_size", "knobs.n_samples_per_prompt", "knobs.max_prompt_tokens", "knobs.max_new_tokens"},
			Msg: fmt.Sprintf("a rollout of rollout_batch_size %d × n_samples_per_prompt %d × (max_prompt_tokens %d + max_new_tokens %d) = %d tokens exceeds the limit of %d",
				k.RolloutBatchSize, k.NSamplesPerPrompt, k.MaxPromptTokens, k.MaxNewTokens, tok, maxRolloutTokens)})
	}
	// A micro-batch never holds more than the train batch.
	micro := min(int64(k.MicroBatchSize), max(int64(k.TrainBatch()), 1))
	if tok := micro * seq; tok > maxMicroTokens {
		probs = append(probs, Problem{Path: "knobs.micro_batch_size",
			Factors: []string{"knobs.micro_batch_size", "knobs.max_prompt_tokens", "knobs.max_new_tokens"},
			Msg: fmt.Sprintf("a micro-batch of %d sequences (micro_batch_size %d) × (max_prompt_tokens %d + max_new_tokens %d) = %d tokens exceeds the limit of %d",
				micro, k.MicroBatchSize, k.MaxPromptTokens, k.MaxNewTokens, tok, maxMicroTokens)})
	}
	return probs
}
