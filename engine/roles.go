package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"stx.dev/stx/engine/rundir"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/runtime/tokenizer"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// role is one node of the graph with what it runs on: its model, its
// specialization, a trainer when it is trainable, the frozen in-role reference
// when init.with_ref is set, and a forward-only producer for the keys it
// gives other roles (or itself: a critic's rollout-time values). A language
// model and a velocity model (the flow roles) train, save and resume the same
// way, through runtime.Trainer.
type role struct {
	node    Node
	index   int
	spec    specializations.Specialization
	model   *runtime.Model // a language-model role's model (nil for a velocity-model role)
	dir     string         // model directory when loaded from disk ("" for a built-in config)
	trainer *runtime.Trainer
	// ref produces ref_log_probs with the frozen copy of the initial weights.
	ref *specializations.Producer
	// self produces the role's own keys with its current weights.
	self *specializations.Producer
	// flow samples from a velocity-model role's model (nil for a language-model role).
	flow *flowSampler
	// side are the model directory's tokenizer and generation files, read
	// once at the start (see runtime.ReadModelFile) and written into every
	// checkpoint, so that they do not depend on dir staying there.
	side map[string][]byte
}

// VelocityDTypeReason is why a velocity-model role (the flow specializations) refuses a
// model.dtype other than "float32".
const VelocityDTypeReason = `the velocity model of the flow specializations (flow_mlp) computes in float32 only: ` +
	`bfloat16 mixed precision applies to language models; use "float32"`

// computeLine is the start line saying how the role's model computes when its model.dtype is
// not float32 ("" otherwise).
func (r *role) computeLine(b *runtime.Backend) string {
	if r.model == nil {
		return ""
	}
	return runtime.ComputeDTypeLine(r.name(), r.trainable(), b, r.model.ComputeDType)
}

// trainable reports whether the role takes optimizer steps.
func (r *role) trainable() bool { return r.trainer != nil }

func (r *role) name() string { return r.node.Role.Name }

// builtinModel reports whether a model source names a built-in config.
func builtinModel(source string) bool {
	_, ok := runtime.BuiltinConfig(source)
	return ok
}

// roleSeed is the initialisation seed of a built-in model source. It is the
// same for every role, so that a built-in source behaves like a checkpoint
// directory: roles naming the same source start from the same weights (a
// dpo_distributed reference equals the initial policy). Value heads get a
// seed of their own per role.
func roleSeed(k schema.Knobs, i int) uint64 { return uint64(k.Seed) + 1 + uint64(i)*7919 }

func sourceSeed(k schema.Knobs) uint64 { return uint64(k.Seed) + 1 }

// roleSource is where a role's initial weights come from: model.source, or
// that of the role model.init_from names; a built-in starting model
// (tiny-sft, tiny-teacher) is the cached directory starts gives for it.
func roleSource(rec *schema.Recipe, i int, starts map[string]string) (string, error) {
	r := rec.Roles[i]
	src := r.Model.Source
	if from := r.Model.InitFrom; from != "" {
		j := slices.IndexFunc(rec.Roles, func(x schema.Role) bool { return x.Name == from })
		if j < 0 {
			return "", fmt.Errorf("role %q: init_from %q is not a role", r.Name, from)
		}
		src = rec.Roles[j].Model.Source
	}
	if src == "" {
		src = "tiny"
	}
	if d, ok := starts[src]; ok {
		src = d
	}
	return src, nil
}

// openModel opens a role's weights: model.source (a built-in config, seeded
// per role, a built-in starting model, or a Hugging Face directory), or,
// with model.init_from, the same initial weights as the named role;
// resumed, when saved is set, the checkpoint directory saved holds them
// instead. init.value_head, or a specialization whose contract says so,
// adds a scalar head.
func openModel(rec *schema.Recipe, i int, saved string, starts map[string]string) (*runtime.Model, string, error) {
	r := rec.Roles[i]
	src, err := roleSource(rec, i, starts)
	if err != nil {
		return nil, "", err
	}
	if saved != "" {
		src = saved
	}
	// A Hugging Face hub id ("Qwen/Qwen2.5-0.5B-Instruct") is read from the shared HF cache,
	// downloaded into it when missing; a directory or a built-in name stays as it is.
	if src, err = resolveModelSource(context.Background(), src, roleRevision(rec, i), nil); err != nil {
		return nil, "", fmt.Errorf("role %q: %w", r.Name, err)
	}
	// A PEFT adapter directory as the source: the model is its base with its adapters
	// (buildRoles attaches them), and the base is the directory the model comes from.
	if runtime.IsAdapterDir(src) {
		if src, err = adapterBaseDir(src); err != nil {
			return nil, "", fmt.Errorf("role %q: %w", r.Name, err)
		}
	}
	var m *runtime.Model
	if l := r.Model.LoRA; l != nil || sourceAdapter(rec, i, starts) != "" {
		// A LoRA role's frozen base is read as it will be held (model.lora.base_dtype).
		base := ""
		if l != nil {
			base = l.BaseDType
		}
		m, err = runtime.OpenModelForLoRA(src, sourceSeed(rec.Knobs), base)
	} else {
		m, err = runtime.OpenModel(src, sourceSeed(rec.Knobs))
	}
	if err != nil {
		return nil, "", fmt.Errorf("role %q: model %q: %w (built-in starting models: %s)", r.Name, src, err,
			strings.Join(StarterNames(), ", "))
	}
	m.ActivationCheckpointing = r.Model.ActivationCheckpointing
	// model.dtype: the compute dtype of its products (mixed precision); the weights stay f32.
	if m.ComputeDType, err = runtime.ParseComputeDType(r.Model.DType); err != nil {
		return nil, "", fmt.Errorf("role %q: model.dtype: %w", r.Name, err)
	}
	dir := ""
	if !builtinModel(src) {
		dir = src
	}
	c, err := specializations.Get(r.Specialization)
	if err != nil {
		return nil, "", fmt.Errorf("role %q: %w", r.Name, err)
	}
	if r.InitBool("value_head") || c.ValueHead {
		if err := m.AddValueHead(roleSeed(rec.Knobs, i) + 1); err != nil {
			return nil, "", fmt.Errorf("role %q: value head: %w", r.Name, err)
		}
	}
	return m, dir, nil
}

// buildRoles creates the runtime side of every node. total is the number of
// optimizer steps the schedule spans; starts maps built-in starting models
// to their cached directories. Resuming, from says where the checkpoint is:
// a trainable role whose weights come from a model directory is opened from
// its saved copy there, so the run resumes even when that directory has
// gone (the trainer then restores the optimizer state from the same place).
// Frozen roles and roles that keep a frozen reference of their initial
// weights (with_ref) open the initial weights the run kept (keepInitial),
// or else their source.
func buildRoles(b *runtime.Backend, g *Graph, total int, from *resumeFrom, starts map[string]string) ([]*role, error) {
	rec := g.Recipe
	var roles []*role
	for i, n := range g.Nodes {
		spec, err := specializations.New(specializations.RoleConfig{Role: n.Role, Knobs: rec.Knobs})
		if err != nil {
			return nil, fmt.Errorf("role %q: %w", n.Role.Name, err)
		}
		if fs, ok := spec.(specializations.Flow); ok {
			r, err := velocityRole(b, rec, i, n, fs, total)
			if err != nil {
				return nil, err
			}
			roles = append(roles, r)
			continue
		}
		lm, ok := spec.(specializations.LM)
		if !ok {
			return nil, fmt.Errorf("role %q: specialization %q is not a language-model specialization; neither a language-model nor a velocity-model specialization", n.Role.Name, n.Role.Specialization)
		}
		withRef := n.Role.Trainable && slices.Contains(n.Requires, rollout.KeyRefLogProbs) && n.Role.InitBool("with_ref")
		// A LoRA role's checkpoint holds its adapters alone: resumed, its base opens from
		// where it first came from, and the trainer restores the adapters. A source that is a
		// PEFT adapter directory makes a LoRA role too.
		adapter := sourceAdapter(rec, i, starts)
		lora := n.Role.Model.LoRA != nil || adapter != ""
		saved := from.weights(rec, i, n.Role.Trainable && !withRef && !lora, starts)
		m, dir, err := openModel(rec, i, saved, starts)
		if err != nil {
			return nil, err
		}
		if lora {
			if err := addAdapters(rec, i, m, adapter, starts); err != nil {
				return nil, err
			}
		}
		r := &role{node: n, index: i, spec: lm, model: m, dir: dir}
		if dir != "" {
			if r.side, err = readSideFiles(dir); err != nil {
				return nil, fmt.Errorf("role %q: %w", n.Role.Name, err)
			}
		}
		if withRef {
			// With adapters, the reference is the base: the same weights with the adapters
			// off, no copy (as TRL and verl do).
			ref := m.WithoutAdapters()
			if !lora {
				// One copy of the initial weights, straight from the policy's tensors, held in
				// bfloat16 where that is exact (runtime.Model.FrozenCopy).
				if ref, err = m.FrozenCopy(); err != nil {
					return nil, fmt.Errorf("role %q: reference: %w", n.Role.Name, err)
				}
			}
			ref.ComputeDType = m.ComputeDType // the reference computes as the policy does
			if r.ref, err = specializations.NewProducer(b, lm, ref); err != nil {
				return nil, fmt.Errorf("role %q: reference: %w", n.Role.Name, err)
			}
		}
		if len(n.Produces) > 0 {
			if r.self, err = specializations.NewProducer(b, lm, m); err != nil {
				return nil, fmt.Errorf("role %q: producer: %w", n.Role.Name, err)
			}
		}
		if n.Role.Trainable {
			cfg, err := trainerConfig(rec.Knobs, total)
			if err != nil {
				return nil, err
			}
			if r.trainer, err = runtime.NewTrainer(b, m, lm.Loss(), cfg); err != nil {
				return nil, fmt.Errorf("role %q: trainer: %w", n.Role.Name, err)
			}
		} else {
			m.SetTrainable(false)
		}
		if err := placeRole(b, r); err != nil {
			return nil, err
		}
		roles = append(roles, r)
	}
	if err := shareLoRABases(b, rec, roles, starts); err != nil {
		return nil, err
	}
	return roles, nil
}

// sourceAdapter is role i's source when that is a PEFT adapter directory, else "".
func sourceAdapter(rec *schema.Recipe, i int, starts map[string]string) string {
	src, err := roleSource(rec, i, starts)
	if err != nil || builtinModel(src) || !runtime.IsAdapterDir(src) {
		return ""
	}
	return src
}

// adapterBaseDir is the model directory of the base a PEFT adapter directory names
// (base_model_name_or_path: a directory, or a Hub id read from the Hugging Face cache).
func adapterBaseDir(adapter string) (string, error) {
	_, base, err := runtime.ReadAdapterConfig(adapter)
	if err != nil {
		return "", err
	}
	if base == "" {
		return "", fmt.Errorf("adapter %s names no base model (base_model_name_or_path)", adapter)
	}
	if builtinModel(base) || IsStarter(base) {
		return "", fmt.Errorf("adapter %s: base %q is a built-in name, not a model directory", adapter, base)
	}
	return resolveModelSource(context.Background(), base, "", nil)
}

// addAdapters gives role i's model the adapters of its model.lora: new ones, seeded per role,
// or those of a PEFT directory (lora.adapter, else the role's source when that is one), whose
// adapter_config.json then gives the rank, alpha, targets and rsLoRA. Saved adapters name the
// role's base as theirs.
func addAdapters(rec *schema.Recipe, i int, m *runtime.Model, sourceAdapter string, starts map[string]string) error {
	r := rec.Roles[i]
	l := r.Model.LoRA
	if l == nil {
		l = &schema.LoRA{}
	}
	cfg := runtime.LoRAConfig{Rank: l.Rank, Alpha: l.Alpha, Dropout: l.Dropout, Targets: l.Targets, Init: l.Init, RSLoRA: l.RSLoRA, BaseDType: l.BaseDType}
	if len(cfg.Targets) == 0 {
		cfg.Targets = []string{"q_proj", "k_proj", "v_proj", "o_proj"}
	}
	adapter, field := l.Adapter, "model.lora.adapter"
	if adapter == "" {
		adapter, field = sourceAdapter, "model.source"
	}
	if adapter != "" {
		from, _, err := runtime.ReadAdapterConfig(adapter)
		if err != nil {
			return fmt.Errorf("role %q: %s: %w", r.Name, field, err)
		}
		cfg.Rank, cfg.Alpha, cfg.Targets, cfg.RSLoRA = from.Rank, from.Alpha, from.Targets, from.RSLoRA
	}
	if err := m.AddLoRA(cfg, roleSeed(rec.Knobs, i)+2); err != nil {
		return fmt.Errorf("role %q: model.lora: %w", r.Name, err)
	}
	if adapter != "" {
		if err := m.LoadAdapters(adapter); err != nil {
			return fmt.Errorf("role %q: %s: %w", r.Name, field, err)
		}
	}
	src, err := roleSource(rec, i, starts)
	if err != nil {
		return err
	}
	if sourceAdapter != "" {
		_, src, _ = runtime.ReadAdapterConfig(sourceAdapter) // read above
	}
	if !builtinModel(src) {
		if st, err := os.Stat(src); err == nil && st.IsDir() {
			if abs, err := filepath.Abs(src); err == nil {
				src = abs
			}
		}
		m.SetAdapterBase(src) // a directory, or the Hub id as the recipe gives it
	}
	return nil
}

// shareLoRABases makes a frozen language-model role without adapters whose weights are the
// base of a LoRA role (the same source, value head and dtype; no placement on devices) compute
// with that role's model, adapters off, instead of holding a second copy of the base: a
// dpo_distributed reference on the same source is then the base as TRL's and verl's are.
func shareLoRABases(b *runtime.Backend, rec *schema.Recipe, roles []*role, starts map[string]string) error {
	for _, fr := range roles {
		if fr.model == nil || fr.trainer != nil || fr.model.LoRA() != nil || len(fr.node.Role.Devices) > 0 {
			continue
		}
		src, err := roleSource(rec, fr.index, starts)
		if err != nil {
			return err
		}
		for _, p := range roles {
			if p.model == nil || p.model.LoRA() == nil || p.trainer == nil || len(p.node.Role.Devices) > 0 {
				continue
			}
			psrc, err := roleSource(rec, p.index, starts)
			if err != nil {
				return err
			}
			if psrc != src || p.model.Config.HasValueHead || fr.model.Config.HasValueHead ||
				p.model.ComputeDType != fr.model.ComputeDType {
				continue
			}
			base := p.model.WithoutAdapters()
			base.ActivationCheckpointing = fr.model.ActivationCheckpointing
			fr.model = base
			if fr.self != nil {
				lm := fr.spec.(specializations.LM)
				if fr.self, err = specializations.NewProducer(b, lm, base); err != nil {
					return fmt.Errorf("role %q: producer: %w", fr.name(), err)
				}
			}
			break
		}
	}
	return nil
}

// velocityRole builds a velocity-model role (the flow specializations): its
// model.source names a built-in velocity model ("flow_mlp"), initialised from
// the seed; resumed, the trainer restores its weights from the checkpoint as
// it does a language model's.
func velocityRole(b *runtime.Backend, rec *schema.Recipe, i int, n Node, spec specializations.Flow, total int) (*role, error) {
	cfg, ok := runtime.BuiltinVelocityConfig(n.Role.Model.Source)
	if !ok {
		return nil, fmt.Errorf("role %q: a velocity-model role needs model.source \"flow_mlp\", got %q", n.Role.Name, n.Role.Model.Source)
	}
	if dt := n.Role.Model.DType; dt != "" && dt != "float32" {
		return nil, fmt.Errorf("role %q: model.dtype %q: %s", n.Role.Name, dt, VelocityDTypeReason)
	}
	if n.Role.Model.LoRA != nil {
		return nil, fmt.Errorf("role %q: model.lora: LoRA adapts the projections of language models; the flow specializations' velocity model (flow_mlp) trains all its weights", n.Role.Name)
	}
	m, err := runtime.NewVelocityModel(cfg, sourceSeed(rec.Knobs))
	if err != nil {
		return nil, fmt.Errorf("role %q: %w", n.Role.Name, err)
	}
	r := &role{node: n, index: i, spec: spec}
	if n.Role.Trainable {
		tc, err := trainerConfig(rec.Knobs, total)
		if err != nil {
			return nil, err
		}
		// weight_decay is a language-model knob: the velocity MLP trains with plain Adam.
		tc.AdamW.WeightDecay = 0
		if r.trainer, err = runtime.NewTrainer(b, m, spec.Loss(), tc); err != nil {
			return nil, fmt.Errorf("role %q: trainer: %w", n.Role.Name, err)
		}
	}
	if r.flow, err = newFlowSampler(b, spec, m); err != nil {
		return nil, fmt.Errorf("role %q: %w", n.Role.Name, err)
	}
	return r, nil
}

// resumeFrom is where a resumed run finds weights other than its sources:
// the checkpoint, and the initial weights it kept (rundir.InitialDir).
type resumeFrom struct {
	cp      *rundir.Checkpoint
	initial string
}

// weights is the directory to open role i of rec from when resuming ("":
// its source). trained says whether the checkpoint holds the role's
// weights to continue from. Built-in sources are rebuilt from the seed.
func (f *resumeFrom) weights(rec *schema.Recipe, i int, trained bool, starts map[string]string) string {
	src, err := roleSource(rec, i, starts)
	if f == nil || err != nil || builtinModel(src) {
		return ""
	}
	name := rec.Roles[i].Name
	if trained {
		if slices.Contains(f.cp.Roles(), name) {
			return f.cp.RolePath(name)
		}
		return ""
	}
	p := filepath.Join(f.initial, name)
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return p
	}
	return ""
}

// modelFiles lists the files of a model directory that make the model:
// config.json, the weights (single file or index and shards) and the side
// files, each resolved as runtime.ResolveModelFile does (no link leading
// outside the directory).
func modelFiles(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		keep := name == "config.json" || name == "model.safetensors.index.json" || slices.Contains(sideFiles, name) ||
			strings.HasSuffix(name, ".safetensors") && name != "optimizer.safetensors" && !strings.HasPrefix(name, ".")
		if !keep {
			continue
		}
		p, err := runtime.ResolveModelFile(dir, name)
		if err != nil {
			return nil, err
		}
		out[name] = p
	}
	return out, nil
}

// sideFiles are the files of a Hugging Face model directory besides its
// weights and config that a saved role keeps (tokenizer, generation
// defaults).
var sideFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"generation_config.json", "vocab.json", "merges.txt"}

// readSideFiles reads the side files a model directory has. A link that
// leads outside the directory is an error now, before any training, rather
// than a secret copied into every checkpoint.
func readSideFiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range sideFiles {
		data, err := runtime.ReadModelFile(dir, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[name] = data
	}
	return out, nil
}

// schedule is the LR schedule of the knobs over total optimizer steps. It is
// rebuilt from the running recipe at each rollout boundary (hot knobs).
func schedule(k schema.Knobs, total int) runtime.Schedule {
	s := runtime.Schedule{Kind: k.LRSchedule, BaseLR: k.LR, TotalSteps: total, WarmupSteps: -1,
		WarmupRatio: k.WarmupRatio, MinLRRatio: k.MinLRRatio}
	if k.WarmupSteps != nil {
		s.WarmupSteps = *k.WarmupSteps
	}
	return s
}

func trainerConfig(k schema.Knobs, total int) (runtime.TrainerConfig, error) {
	cfg := runtime.TrainerConfig{
		AdamW: runtime.AdamW{Beta1: k.AdamBeta1, Beta2: k.AdamBeta2, Eps: k.AdamEps,
			WeightDecay: k.WeightDecay, NoDecayNormsAndBiases: true},
		Schedule:    schedule(k, total),
		MaxGradNorm: k.MaxGradNorm,
	}
	if err := cfg.AdamW.Validate(); err != nil {
		return cfg, fmt.Errorf("optimizer knobs: %w", err)
	}
	if err := cfg.Schedule.Validate(); err != nil {
		return cfg, fmt.Errorf("lr schedule knobs: %w", err)
	}
	return cfg, nil
}

// roleTokenizer is the tokenizer of the rollout model: byte-level for the
// built-in configs (and checkpoints saved from them), tokenizer.json of a
// checkpoint directory otherwise.
func roleTokenizer(r *role) (tokenizer.Tokenizer, error) {
	tok, err := runtime.ModelTokenizer(r.model, r.dir)
	if err != nil {
		return nil, fmt.Errorf("role %q: %w", r.name(), err)
	}
	return tok, nil
}

// produceInto runs p on a copy of data and copies the keys into data under
// the names of rename (wide columns key/0.. included), so a producer's other
// outputs never overwrite columns of data.
func produceInto(p *specializations.Producer, data *rollout.Rollout, opts specializations.BatchOptions, keys, targets []string) error {
	all := make([]int, data.Len())
	for i := range all {
		all[i] = i
	}
	tmp, err := data.Select(all)
	if err != nil {
		return err
	}
	rename := map[string]string{}
	for i, k := range keys {
		rename[k] = targets[i]
	}
	if err := p.Produce(tmp, opts, rename); err != nil {
		return err
	}
	if data.Tok == nil {
		data.Tok = map[string][][]float32{}
	}
	if data.Row == nil {
		data.Row = map[string][]float64{}
	}
	for _, name := range targets {
		found := false
		for k, col := range tmp.Tok {
			if k == name || strings.HasPrefix(k, name+"/") {
				data.Tok[k], found = col, true
			}
		}
		for k, col := range tmp.Row {
			if k == name || strings.HasPrefix(k, name+"/") {
				data.Row[k], found = col, true
			}
		}
		if name == rollout.KeyRewards && tmp.Reward != nil {
			data.Reward, found = tmp.Reward, true
		}
		if !found {
			return fmt.Errorf("producer gave no %q", name)
		}
	}
	return nil
}

// OpenAdapterModel opens the model a PEFT adapter directory makes: its base (base, or else
// the adapter's base_model_name_or_path: a model directory or a Hub id, read from the Hugging
// Face cache) with the adapters attached.
func OpenAdapterModel(ctx context.Context, adapterDir, base string) (*runtime.Model, error) {
	var dir string
	var err error
	if base == "" {
		dir, err = adapterBaseDir(adapterDir)
	} else if builtinModel(base) || IsStarter(base) {
		err = fmt.Errorf("base %q is a built-in name, not a model directory", base)
	} else {
		dir, err = resolveModelSource(ctx, base, "", nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: give the base model's directory", err)
	}
	m, err := runtime.LoadModel(dir)
	if err != nil {
		return nil, fmt.Errorf("base of adapter %s: %w", adapterDir, err)
	}
	if err := m.AttachAdapters(adapterDir); err != nil {
		return nil, err
	}
	return m, nil
}
