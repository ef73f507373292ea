package schema

// The Go side of schema.cue: plain structs decoded from a validated recipe.
// The engine consumes these and never sees CUE values. Field tags are the
// CUE field names; keep them in step with schema.cue (TestStructsMatchSchema
// checks every CUE field has a Go field and the reverse).

// Recipe is one fully resolved recipe: defaults filled in, overrides applied.
type Recipe struct {
	Name        string `json:"-"` // the key in recipes`
	Description string `json:"description"`
	Roles       []Role `json:"roles"`
	Syncs       []Sync `json:"syncs"`
	Task        Task   `json:"task"`
	Knobs       Knobs  `json:"knobs"`
	// Rollout is the external rollout engine (nil: the in-process sampler).
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Rollout is an external rollout engine: inference servers and how to ask them.
type Rollout struct {
	Engine         string   `json:"engine"`
	Servers        []string `json:"servers"`
	Model          string   `json:"model,omitempty"`
	TimeoutS       float64  `json:"timeout_s"`
	UpdateTimeoutS float64  `json:"update_timeout_s"`
	Attempts       int      `json:"attempts"`
	ShardRows      int      `json:"shard_rows"`
	WeightsDir     string   `json:"weights_dir,omitempty"`
	SleepBetween   bool     `json:"sleep_between"`
}

// Role is one model of a recipe bound to a specialization.
type Role struct {
	Name           string         `json:"name"`
	Specialization string         `json:"specialization"`
	Trainable      bool           `json:"trainable"`
	SyncToRollout  bool           `json:"sync_to_rollout"`
	Pool           string         `json:"pool"`
	Model          Model          `json:"model"`
	Devices        []int          `json:"devices,omitempty"`
	Sharding       string         `json:"sharding,omitempty"` // "", "replicate" or "fsdp"
	RolloutDevice  *int           `json:"rollout_device,omitempty"`
	Offload        bool           `json:"offload,omitempty"`
	Init           map[string]any `json:"init"`
}

// InitBool returns init[key] when it is a bool, else false.
func (r Role) InitBool(key string) bool {
	b, _ := r.Init[key].(bool)
	return b
}

// InitString returns init[key] when it is a string, else "".
func (r Role) InitString(key string) string {
	s, _ := r.Init[key].(string)
	return s
}

// Model says where a role's weights come from.
type Model struct {
	Source   string `json:"source"`
	InitFrom string `json:"init_from,omitempty"`
	DType    string `json:"dtype"`
	// Revision of a Hub model id Source (a branch, tag or commit sha; "" is "main").
	Revision string `json:"revision,omitempty"`
	// ActivationCheckpointing recomputes each decoder layer's activations in the backward pass.
	ActivationCheckpointing bool `json:"activation_checkpointing,omitempty"`
	// LoRA trains low-rank adapters on the frozen weights (nil: full fine-tuning).
	LoRA *LoRA `json:"lora,omitempty"`
}

// LoRA configures a role's low-rank adapters (schema #LoRA).
type LoRA struct {
	Rank    int      `json:"rank"`
	Alpha   float64  `json:"alpha"`
	Dropout float64  `json:"dropout"`
	Targets []string `json:"targets,omitempty"`
	Init    string   `json:"init"`
	RSLoRA  bool     `json:"rslora"`
	// BaseDType holds the frozen base in "bfloat16" or "float32" ("": its stored dtype).
	BaseDType string `json:"base_dtype,omitempty"`
	// Adapter is a PEFT adapter directory to start from ("": new adapters).
	Adapter string `json:"adapter,omitempty"`
}

// Sync moves keys a source role produces into a target role's batch.
type Sync struct {
	Source     string   `json:"source"`
	Target     string   `json:"target"`
	Keys       []string `json:"keys"`
	TargetKeys []string `json:"target_keys"`
	Stage      string   `json:"stage"`
}

// Task is the data and reward of a recipe.
type Task struct {
	Name           string `json:"name"`
	Path           string `json:"path,omitempty"`
	ValidationPath string `json:"validation_path,omitempty"`
	// ValidationSplit is the held-out fraction of the train file's prompts
	// when ValidationPath is empty (0: the default 0.1).
	ValidationSplit float64  `json:"validation_split"`
	Columns         Columns  `json:"columns"`
	TrainSize       int      `json:"train_size"`
	ValidationSize  int      `json:"validation_size"`
	Reward          []Reward `json:"reward"`
	RewardRole      string   `json:"reward_role,omitempty"`

	// Dataset is a Hub dataset id read from its Parquet files instead of Path; Config
	// ("" is "default"), Split ("" is "train") and ValidationSplitName (a held-out
	// split) name its files, Revision its commit ("": main, else refs/convert/parquet).
	Dataset             string `json:"dataset,omitempty"`
	Config              string `json:"config,omitempty"`
	Split               string `json:"split,omitempty"`
	ValidationSplitName string `json:"validation_split_name,omitempty"`
	Revision            string `json:"revision,omitempty"`

	// Workflow is nil for single-turn tasks.
	Workflow *Workflow `json:"workflow,omitempty"`
}

// Reward is one weighted reward function.
type Reward struct {
	Fn           string  `json:"fn"`
	Weight       float64 `json:"weight"`
	Tolerance    float64 `json:"tolerance"`
	Pattern      string  `json:"pattern,omitempty"`
	TargetLength int     `json:"target_length,omitempty"`
	Scale        float64 `json:"scale"`
	// Command, URL, Timeout (seconds), Retries and BatchSize configure the
	// external rewards (fn "command" and "http").
	Command   []string `json:"command,omitempty"`
	URL       string   `json:"url,omitempty"`
	Timeout   float64  `json:"timeout"`
	Retries   int      `json:"retries"`
	BatchSize int      `json:"batch_size"`
}

// Columns name the record fields of a dataset; an empty name takes the
// field of the same name (Prompt "" reads "prompt").
type Columns struct {
	Prompt     string `json:"prompt"`
	Messages   string `json:"messages"`
	Answer     string `json:"answer"`
	Completion string `json:"completion"`
	Chosen     string `json:"chosen"`
	Rejected   string `json:"rejected"`
	Label      string `json:"label"`
	ID         string `json:"id"`
	DataSource string `json:"data_source"`
	Metadata   string `json:"metadata"`
}

// Knobs are a recipe's numbers and switches; `stx knobs` documents each.
// Optional knobs are pointers: nil means "not set" (e.g. dual clip off).
type Knobs struct {
	Seed              int     `json:"seed"`
	NumRollout        int     `json:"num_rollout"`
	TotalBatches      int     `json:"total_batches"`
	TotalEpochs       int     `json:"total_epochs"`
	NumTrainPasses    int     `json:"num_train_passes"`
	RolloutBatchSize  int     `json:"rollout_batch_size"`
	NSamplesPerPrompt int     `json:"n_samples_per_prompt"`
	TrainBatchSize    int     `json:"train_batch_size"`
	MicroBatchSize    int     `json:"micro_batch_size"`
	Pack              bool    `json:"pack"`
	PackTokens        int     `json:"pack_tokens"`
	MaxPromptTokens   int     `json:"max_prompt_tokens"`
	MaxNewTokens      int     `json:"max_new_tokens"`
	Temperature       float64 `json:"temperature"`
	TopP              float64 `json:"top_p"`
	TopK              int     `json:"top_k"`

	LR          float64 `json:"lr"`
	LRSchedule  string  `json:"lr_schedule"`
	WarmupRatio float64 `json:"warmup_ratio"`
	WarmupSteps *int    `json:"warmup_steps,omitempty"`
	MinLRRatio  float64 `json:"min_lr_ratio"`
	AdamBeta1   float64 `json:"adam_beta1"`
	AdamBeta2   float64 `json:"adam_beta2"`
	AdamEps     float64 `json:"adam_eps"`
	WeightDecay float64 `json:"weight_decay"`
	MaxGradNorm float64 `json:"max_grad_norm"`

	LossAggMode        string   `json:"loss_agg_mode"`
	LossScaleFactor    *float64 `json:"loss_scale_factor,omitempty"`
	PolicyLoss         string   `json:"policy_loss"`
	ClipRatioLow       float64  `json:"clip_ratio_low"`
	ClipRatioHigh      float64  `json:"clip_ratio_high"`
	DualClipC          *float64 `json:"dual_clip_c,omitempty"`
	GSPOSeqLogRatioMax float64  `json:"gspo_seq_logratio_max"`
	CISPOClipLow       float64  `json:"cispo_clip_low"`
	CISPOClipHigh      float64  `json:"cispo_clip_high"`
	DROBeta            float64  `json:"dro_beta"`
	TISCap             *float64 `json:"tis_cap,omitempty"`
	EntropyCoef        float64  `json:"entropy_coef"`
	ClipRangeValue     float64  `json:"cliprange_value"`

	UseKLLoss     bool    `json:"use_kl_loss"`
	KLLossCoef    float64 `json:"kl_loss_coef"`
	KLEstimator   string  `json:"kl_estimator"`
	KLGrad        string  `json:"kl_grad"`
	UseKLInReward bool    `json:"use_kl_in_reward"`
	KLCoef        float64 `json:"kl_coef"`

	Estimator               string            `json:"estimator"`
	EstimatorMap            map[string]string `json:"estimator_map"`
	NormAdvByStd            bool              `json:"norm_adv_by_std"`
	AdvEpsilon              float64           `json:"adv_epsilon"`
	StdDDOF                 int               `json:"std_ddof"`
	Gamma                   float64           `json:"gamma"`
	Lambda                  float64           `json:"lambda"`
	WhitenAdvantages        bool              `json:"whiten_advantages"`
	UsePrecomputedAdvantage bool              `json:"use_precomputed_advantage"`

	MinTrajsPerGroup     int  `json:"min_trajs_per_group"`
	FilterUniformGroups  bool `json:"filter_uniform_groups"`
	MinPartialSolveTasks int  `json:"min_partial_solve_tasks"`
	DynamicSampling      bool `json:"dynamic_sampling"`
	MaxNumGenBatches     int  `json:"max_num_gen_batches"`
	RolloutRetries       int  `json:"rollout_retries"`
	MaxStaleness         int  `json:"max_staleness"`

	Beta                 float64   `json:"beta"`
	DPOLossType          Terms     `json:"dpo_loss_type"`
	DPOLossWeights       []float64 `json:"dpo_loss_weights"`
	LabelSmoothing       float64   `json:"label_smoothing"`
	IPOLengthNormalize   bool      `json:"ipo_length_normalize"`
	SimPOGamma           float64   `json:"simpo_gamma"`
	ORPOLambda           float64   `json:"orpo_lambda"`
	KTODesirableWeight   float64   `json:"kto_desirable_weight"`
	KTOUndesirableWeight float64   `json:"kto_undesirable_weight"`
	RMMargin             float64   `json:"rm_margin"`
	CenterRewardsCoef    float64   `json:"center_rewards_coef"`

	KLPenaltyCoef       float64 `json:"kl_penalty_coef"`
	KLDiscountFactor    float64 `json:"kl_discount_factor"`
	GKDBeta             float64 `json:"gkd_beta"`
	GKDLambda           float64 `json:"gkd_lambda"`
	GKDTemperature      float64 `json:"gkd_temperature"`
	GKDTeacherTopK      int     `json:"gkd_teacher_top_k"`
	BetaStart           float64 `json:"beta_start"`
	BetaEnd             float64 `json:"beta_end"`
	BetaDecayRollouts   int     `json:"beta_decay_rollouts"`
	K3Grad              string  `json:"k3_grad"`
	AggrevateCandidates int     `json:"aggrevate_candidates"`

	FlowSteps         int     `json:"flow_steps"`
	FlowNoiseLevel    float64 `json:"flow_noise_level"`
	FlowSigmaSampling string  `json:"flow_sigma_sampling"`
	FlowClipEps       float64 `json:"flow_clip_eps"`

	TaskDigits int    `json:"task_digits"`
	TaskOps    string `json:"task_ops"`

	EvalEvery            int     `json:"eval_every"`
	EvalBeforeTrain      bool    `json:"eval_before_train"`
	EvalOnly             bool    `json:"eval_only"`
	NValSamplesPerPrompt int     `json:"n_val_samples_per_prompt"`
	MaxValPrompts        int     `json:"max_val_prompts"`
	CorrectThreshold     float64 `json:"correct_threshold"`
	SaveEvery            int     `json:"save_every"`
	KeepCheckpoints      int     `json:"keep_checkpoints"`
	LogEpisodesEvery     int     `json:"log_episodes_every"`
}

// TrainBatch is the number of sequences per optimizer step.
func (k Knobs) TrainBatch() int {
	if k.TrainBatchSize > 0 {
		return k.TrainBatchSize
	}
	return k.RolloutBatchSize * k.NSamplesPerPrompt
}

// EstimatorFor is the advantage estimator of a role: the per-role map wins.
func (k Knobs) EstimatorFor(role string) string {
	if e, ok := k.EstimatorMap[role]; ok {
		return e
	}
	return k.Estimator
}

// Role returns the role with the given name.
func (r *Recipe) Role(name string) (Role, bool) {
	for _, x := range r.Roles {
		if x.Name == name {
			return x, true
		}
	}
	return Role{}, false
}

// Defaults of fields the schema leaves optional so that recipes can give
// them defaults of their own (CUE keeps no default where two differ).
const (
	DefaultModelSource    = "tiny"
	DefaultTrainSize      = 2000
	DefaultValidationSize = 200
)

// fillDefaults sets the schema's defaults of the fields neither the recipe
// nor the user set.
func (r *Recipe) fillDefaults() {
	for i := range r.Roles {
		if r.Roles[i].Model.Source == "" {
			r.Roles[i].Model.Source = DefaultModelSource
		}
	}
	if r.Task.TrainSize == 0 {
		r.Task.TrainSize = DefaultTrainSize
	}
	if r.Task.ValidationSize == 0 {
		r.Task.ValidationSize = DefaultValidationSize
	}
}
