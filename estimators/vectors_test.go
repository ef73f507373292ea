package estimators

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/rollout"
)

// vectorsPath is the shared test-vector file (testdata/algorithms.json), relative to this package.
const vectorsPath = "../testdata/algorithms.json"

// ownedSections are the sections of the vectors this package implements; every case of these
// sections must be consumed by a handler below.
var ownedSections = []string{"A", "G", "J"}

type vectorCase struct {
	Name, Fn, Section, Note string
	Inputs, Params, Outputs map[string]json.RawMessage
}

type tolerance struct{ Rel, Abs float64 }

type vectorFile struct {
	Tolerance tolerance
	Cases     []vectorCase
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("read test vectors: %v", err)
	}
	var f vectorFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("decode test vectors: %v", err)
	}
	if f.Tolerance.Rel <= 0 || f.Tolerance.Abs <= 0 {
		t.Fatalf("test vectors carry no tolerance: %+v", f.Tolerance)
	}
	return f
}

// vectorHandlers consume one case each, keyed by the case's fn.
var vectorHandlers = map[string]func(t *testing.T, c vectorCase, tol tolerance){
	"advantage.grpo":                  vecOutcome(GRPO),
	"advantage.dr_grpo":               vecOutcome(DrGRPO),
	"advantage.reinforce":             vecOutcome(Reinforce),
	"advantage.rloo":                  vecOutcome(RLOO),
	"advantage.reinforce_pp_baseline": vecOutcome(ReinforcePPBaseline),
	"advantage.remax":                 vecReMax,
	"advantage.gae":                   vecGAE,
	"advantage.broadcast":             vecBroadcast,
	"advantage.precomputed":           vecPrecomputed,
	"rejection.filter_groups":         vecFilterGroups,
	"metrics.pass_at_k":               vecPassAtK,
	"metrics.pass_at_k_mean":          vecPassAtKMean,
}

func TestVectors(t *testing.T) {
	f := loadVectors(t)
	consumed := 0
	for _, c := range f.Cases {
		if !slices.Contains(ownedSections, c.Section) {
			continue
		}
		h, ok := vectorHandlers[c.Fn]
		if !ok {
			t.Errorf("case %s (section %s): fn %q has no handler: the case is not consumed", c.Name, c.Section, c.Fn)
			continue
		}
		consumed++
		t.Run(c.Name, func(t *testing.T) { h(t, c, f.Tolerance) })
	}
	// The file holds 18 cases of sections A, G and J today; new ones only add to it. This also
	// catches a renamed section or an unreadable case list.
	if consumed < 18 {
		t.Errorf("consumed %d cases of sections %v, want at least 18", consumed, ownedSections)
	}
}

func decode[T any](t *testing.T, m map[string]json.RawMessage, key string) T {
	t.Helper()
	var v T
	raw, ok := m[key]
	if !ok {
		t.Fatalf("missing field %q", key)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %q: %v", key, err)
	}
	return v
}

// decodeOr decodes key if present, else returns def.
func decodeOr[T any](t *testing.T, m map[string]json.RawMessage, key string, def T) T {
	t.Helper()
	if _, ok := m[key]; !ok {
		return def
	}
	return decode[T](t, m, key)
}

func closeTo(got, want float64, tol tolerance) bool {
	return math.Abs(got-want) <= tol.Abs+tol.Rel*math.Abs(want)
}

func assertClose(t *testing.T, what string, got, want []float64, tol tolerance) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d values %v, want %d %v", what, len(got), got, len(want), want)
		return
	}
	for i := range want {
		if !closeTo(got[i], want[i], tol) {
			t.Errorf("%s[%d] = %.9g, want %.9g", what, i, got[i], want[i])
		}
	}
}

func assertClose2(t *testing.T, what string, got, want [][]float64, tol tolerance) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d rows, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		assertClose(t, fmt.Sprintf("%s[%d]", what, i), got[i], want[i], tol)
	}
}

func f32to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// rolloutAdv runs RolloutAdvantages on r and returns its advantages and returns (nil when the
// estimator gives none) as float64 rows, with its warnings.
func rolloutAdv(t *testing.T, r *rollout.Rollout, cfg Config) (adv, ret [][]float64, warnings []string) {
	t.Helper()
	warnings, err := RolloutAdvantages(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Tok[rollout.KeyAdvantages] {
		adv = append(adv, f32to64(row))
	}
	for _, row := range r.Tok[rollout.KeyReturns] {
		ret = append(ret, f32to64(row))
	}
	return adv, ret, warnings
}

// float32 outputs (RolloutAdvantages' per-token advantages) are compared at float32 resolution on top
// of the file's tolerance.
func f32tol(tol tolerance) tolerance { return tolerance{Rel: tol.Rel + 1e-7, Abs: tol.Abs} }

func vecOutcome(name string) func(t *testing.T, c vectorCase, tol tolerance) {
	return func(t *testing.T, c vectorCase, tol tolerance) {
		groups := decode[[][]float64](t, c.Inputs, "groups")
		want := decode[[][]float64](t, c.Outputs, "advantages")
		cfg := defaultConfig()
		cfg.Name = name
		cfg.NormByStd = decodeOr(t, c.Params, "norm_by_std", cfg.NormByStd)
		cfg.Epsilon = decodeOr(t, c.Params, "epsilon", cfg.Epsilon)
		cfg.StdDDOF = decodeOr(t, c.Params, "std_ddof", cfg.StdDDOF)
		out, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: groups}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		assertClose2(t, "advantages", out.Advantages, want, tol)
		// All-equal groups must be exactly 0, not merely close (R2, for the group baselines).
		for g, r := range groups {
			if name != Reinforce && len(r) > 1 && allEqual(r) {
				for i, a := range out.Advantages[g] {
					if a != 0 {
						t.Errorf("group %d (all equal) advantage %d = %g, want exactly 0", g, i, a)
					}
				}
			}
		}
		// Through RolloutAdvantages: one row (1 prompt + 2 response tokens) per trajectory,
		// grouped by GroupID.
		r := &rollout.Rollout{}
		for g, rew := range groups {
			for _, x := range rew {
				r.Tokens = append(r.Tokens, []int32{1, 2, 3})
				r.PromptLen = append(r.PromptLen, 1)
				r.Reward = append(r.Reward, x)
				r.GroupID = append(r.GroupID, fmt.Sprint("task", g))
			}
		}
		adv, _, _ := rolloutAdv(t, r, cfg)
		row := 0
		for g := range want {
			for i, a := range want[g] {
				assertClose(t, fmt.Sprintf("rollout group %d traj %d", g, i), adv[row], []float64{0, a, a}, f32tol(tol))
				row++
			}
		}
	}
}

func vecReMax(t *testing.T, c vectorCase, tol tolerance) {
	r := decode[[]float64](t, c.Inputs, "rewards")
	b := decode[[]float64](t, c.Inputs, "greedy_rewards")
	want := decode[[]float64](t, c.Outputs, "advantages")
	cfg := defaultConfig()
	cfg.Name = ReMax
	out, err := Estimate(Input{OutcomeInput: OutcomeInput{Rewards: [][]float64{r}, Baselines: [][]float64{b}}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "advantages", out.Advantages[0], want, tol)
	// Through RolloutAdvantages: each prompt is a singleton group with its own greedy reward.
	ro := &rollout.Rollout{Row: map[string][]float64{rollout.KeyGreedyReward: b}}
	for i := range r {
		ro.Tokens = append(ro.Tokens, []int32{7, 8})
		ro.PromptLen = append(ro.PromptLen, 1)
		ro.Reward = append(ro.Reward, r[i])
		ro.GroupID = append(ro.GroupID, fmt.Sprint(i))
	}
	adv, _, _ := rolloutAdv(t, ro, cfg)
	for i := range want {
		assertClose(t, fmt.Sprint("rollout ", i), adv[i], []float64{0, want[i]}, f32tol(tol))
	}
}

func vecGAE(t *testing.T, c vectorCase, tol tolerance) {
	rew := decode[[][]float64](t, c.Inputs, "token_rewards")
	val := decode[[][]float64](t, c.Inputs, "values")
	mask := decode[[][]float64](t, c.Inputs, "mask")
	gamma := decode[float64](t, c.Params, "gamma")
	lambda := decode[float64](t, c.Params, "lambda")
	eps := decode[float64](t, c.Params, "whiten_eps")
	wantAdv := decode[[][]float64](t, c.Outputs, "advantages")
	wantRet := decode[[][]float64](t, c.Outputs, "returns")
	wantWhite := decode[[][]float64](t, c.Outputs, "advantages_whitened")

	adv, ret, err := GAEAdvantages(rew, val, mask, nil, gamma, lambda)
	if err != nil {
		t.Fatal(err)
	}
	assertClose2(t, "advantages", adv, wantAdv, tol)
	assertClose2(t, "returns", ret, wantRet, tol)
	white, err := MaskedWhiten(adv, mask, eps)
	if err != nil {
		t.Fatal(err)
	}
	assertClose2(t, "advantages_whitened", white, wantWhite, tol)

	// The registered estimator, with and without whitening.
	cfg := defaultConfig()
	cfg.Name, cfg.Gamma, cfg.Lambda, cfg.WhitenEps = GAE, gamma, lambda, eps
	out, err := Estimate(Input{TokenRewards: rew, Values: val, Mask: mask}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	assertClose2(t, "estimator whitened", out.TokenAdvantages, wantWhite, tol)
	assertClose2(t, "estimator returns", out.Returns, wantRet, tol)
	cfg.Whiten = false
	out, err = Estimate(Input{TokenRewards: rew, Values: val, Mask: mask}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	assertClose2(t, "estimator raw", out.TokenAdvantages, wantAdv, tol)

	// Through RolloutAdvantages: one single-row trajectory per row whose outcome reward is the
	// row's reward on its last valid token (the vectors place it there and nowhere else).
	r := &rollout.Rollout{Tok: map[string][][]float32{rollout.KeyValues: nil, rollout.KeyTokenRewards: nil}}
	for b := range mask {
		last := -1
		for t := range mask[b] {
			if mask[b][t] != 0 {
				last = t
			}
		}
		n := len(mask[b])
		m, v, shaping := make([]float32, n), make([]float32, n), make([]float32, n)
		for t := range mask[b] {
			m[t] = float32(mask[b][t])
			v[t] = float32(val[b][t])
			if t != last {
				shaping[t] = float32(rew[b][t])
			}
		}
		r.Tokens = append(r.Tokens, make([]int32, n))
		r.Mask = append(r.Mask, m)
		r.Reward = append(r.Reward, rew[b][last])
		r.Tok[rollout.KeyValues] = append(r.Tok[rollout.KeyValues], v)
		r.Tok[rollout.KeyTokenRewards] = append(r.Tok[rollout.KeyTokenRewards], shaping)
	}
	cfg.Whiten = true
	gotAdv, gotRet, _ := rolloutAdv(t, r, cfg)
	// Values pass through float32, so allow float32 resolution relative to the values' scale.
	loose := tolerance{Rel: 1e-5, Abs: 1e-6}
	assertClose2(t, "rollout whitened", gotAdv, wantWhite, loose)
	assertClose2(t, "rollout returns", gotRet, wantRet, loose)
}

func vecBroadcast(t *testing.T, c vectorCase, tol tolerance) {
	adv := decode[[]float64](t, c.Inputs, "trajectory_advantages")
	masks := decode[[][][]float32](t, c.Inputs, "step_token_masks")
	want := decode[[][][]float64](t, c.Outputs, "token_advantages")
	// Through RolloutAdvantages: one row per step, the rows of a trajectory sharing Traj;
	// REINFORCE's advantage is the reward, so rewards = trajectory advantages.
	r := &rollout.Rollout{}
	for i := range adv {
		for _, m := range masks[i] {
			r.Tokens = append(r.Tokens, make([]int32, len(m)))
			r.Mask = append(r.Mask, m)
			r.Reward = append(r.Reward, adv[i])
			r.Traj = append(r.Traj, i)
			r.GroupID = append(r.GroupID, "t")
		}
	}
	cfg := defaultConfig()
	cfg.Name = Reinforce
	got, _, _ := rolloutAdv(t, r, cfg)
	row := 0
	for i := range want {
		for s := range want[i] {
			assertClose(t, fmt.Sprintf("rollout traj %d step %d", i, s), got[row], want[i][s], f32tol(tol))
			row++
		}
	}
}

func vecPrecomputed(t *testing.T, c vectorCase, tol tolerance) {
	raw := decode[[]json.RawMessage](t, c.Inputs, "step_advantages")
	kinds := decode[[]string](t, c.Inputs, "step_advantage_kind")
	lens := decode[[]int](t, c.Inputs, "step_response_lengths")
	want := decode[[][]float64](t, c.Outputs, "token_advantages")
	var supplied []*Advantage
	wantMissing, wantWrong := 0, 0
	for i, k := range kinds {
		switch k {
		case "missing":
			supplied = append(supplied, nil)
			wantMissing++
		case "scalar":
			var v float64
			if err := json.Unmarshal(raw[i], &v); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			supplied = append(supplied, ScalarAdvantage(v))
		case "list":
			var v []float64
			if err := json.Unmarshal(raw[i], &v); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if len(v) != lens[i] {
				wantWrong++
			}
			supplied = append(supplied, PerTokenAdvantage(v))
		default:
			t.Fatalf("step %d: unknown kind %q", i, k)
		}
	}
	for i, a := range supplied {
		got, _ := PrecomputedTokens(a, lens[i])
		assertClose(t, fmt.Sprint("step ", i), got, want[i], tol)
	}
	// Through the registered "precomputed" estimator: each step is a row after a 2-token
	// prompt, one trajectory.
	in := Input{Supplied: supplied}
	for i := range supplied {
		m := make([]float64, 2+lens[i])
		for t := 2; t < len(m); t++ {
			m[t] = 1
		}
		in.Mask = append(in.Mask, m)
		in.PromptLen = append(in.PromptLen, 2)
		in.Traj = append(in.Traj, 0)
		in.TokenRewards = append(in.TokenRewards, make([]float64, len(m)))
		in.Values = append(in.Values, nil)
	}
	cfg := defaultConfig()
	cfg.Name = Precomputed
	out, err := Estimate(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		assertClose(t, fmt.Sprint("estimator step ", i), out.TokenAdvantages[i], append([]float64{0, 0}, want[i]...), tol)
	}
	wantWarn := fmt.Sprintf("%d of %d steps had none and %d had a per-token list of the wrong length", wantMissing, len(supplied), wantWrong)
	if len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], wantWarn) {
		t.Errorf("warnings = %q, want one containing %q", out.Warnings, wantWarn)
	}
	// Through RolloutAdvantages, where supplied advantages are a per-token column: the steps
	// whose supplied advantage a column can hold (a scalar, broadcast; a list of the right length).
	r := &rollout.Rollout{Reward: []float64{}, Tok: map[string][][]float32{rollout.KeyAdvantages: nil}}
	var wantRows [][]float64
	for i, a := range supplied {
		if a == nil || !a.IsScalar && len(a.PerToken) != lens[i] {
			continue
		}
		col := make([]float32, 2+lens[i])
		for t := range lens[i] {
			if a.IsScalar {
				col[2+t] = float32(a.Scalar)
			} else {
				col[2+t] = float32(a.PerToken[t])
			}
		}
		r.Tokens = append(r.Tokens, make([]int32, len(col)))
		r.PromptLen = append(r.PromptLen, 2)
		r.Reward = append(r.Reward, 1)
		r.Traj = append(r.Traj, 0)
		r.Tok[rollout.KeyAdvantages] = append(r.Tok[rollout.KeyAdvantages], col)
		wantRows = append(wantRows, append([]float64{0, 0}, want[i]...))
	}
	if len(wantRows) == 0 {
		t.Fatal("no step with a scalar or a right-length list")
	}
	got, _, _ := rolloutAdv(t, r, cfg)
	assertClose2(t, "rollout", got, wantRows, f32tol(tol))
}

func vecFilterGroups(t *testing.T, c vectorCase, _ tolerance) {
	rewards := decode[[][]float64](t, c.Inputs, "group_rewards")
	correct := decode[[][]bool](t, c.Inputs, "group_is_correct")
	cfg := RejectionConfig{
		MinTrajsPerGroup:     decode[int](t, c.Params, "min_trajs_per_group"),
		FilterUniformGroups:  decode[bool](t, c.Params, "filter_uniform_groups"),
		UniformTol:           decode[float64](t, c.Params, "uniform_tol"),
		MinPartialSolveTasks: decode[int](t, c.Params, "min_partial_solve_tasks"),
	}
	wantKept := decode[[]int](t, c.Outputs, "kept_group_indices")
	wantReasons := decode[[]string](t, c.Outputs, "reasons")
	wantAll := decode[int](t, c.Outputs, "solve_all")
	wantNone := decode[int](t, c.Outputs, "solve_none")
	wantPartial := decode[int](t, c.Outputs, "solve_partial")
	wantProceed := decode[bool](t, c.Outputs, "proceed")

	fr, err := FilterGroups(rewards, correct, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fr.Kept, wantKept) || !slices.Equal(fr.Reasons, wantReasons) {
		t.Errorf("kept %v reasons %v, want %v %v", fr.Kept, fr.Reasons, wantKept, wantReasons)
	}
	if fr.SolveAll != wantAll || fr.SolveNone != wantNone || fr.SolvePartial != wantPartial || fr.Proceed != wantProceed {
		t.Errorf("solve all/none/partial/proceed = %d/%d/%d/%v, want %d/%d/%d/%v",
			fr.SolveAll, fr.SolveNone, fr.SolvePartial, fr.Proceed, wantAll, wantNone, wantPartial, wantProceed)
	}

	// Through Reject on Groups (one task per group).
	var gs []Group
	for g := range rewards {
		grp := Group{TaskID: fmt.Sprint("task", g), Role: "policy"}
		for i := range rewards[g] {
			grp.Trajectories = append(grp.Trajectories, Trajectory{Reward: rewards[g][i], IsCorrect: correct[g][i]})
		}
		gs = append(gs, grp)
	}
	rej, err := Reject(gs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var keptIDs, wantIDs []string
	for _, g := range rej.Kept {
		keptIDs = append(keptIDs, g.TaskID)
	}
	for _, g := range wantKept {
		wantIDs = append(wantIDs, gs[g].TaskID)
	}
	if !slices.Equal(keptIDs, wantIDs) {
		t.Errorf("reject kept %v, want %v", keptIDs, wantIDs)
	}
	if rej.SolveAll != wantAll || rej.SolveNone != wantNone || rej.SolvePartial != wantPartial || rej.Proceed != wantProceed {
		t.Errorf("reject solve all/none/partial/proceed = %d/%d/%d/%v", rej.SolveAll, rej.SolveNone, rej.SolvePartial, rej.Proceed)
	}
	count := func(reason string) float64 {
		n := 0
		for _, r := range wantReasons {
			if r == reason {
				n++
			}
		}
		return float64(n)
	}
	for k, want := range map[string]float64{
		"rejection/groups_before":     float64(len(rewards)),
		"rejection/groups_after":      float64(len(wantKept)),
		"rejection/dropped_min_trajs": count(ReasonMinTrajs),
		"rejection/dropped_uniform":   count(ReasonUniform),
	} {
		if rej.Metrics[k] != want {
			t.Errorf("metric %s = %g, want %g", k, rej.Metrics[k], want)
		}
	}
}

func vecPassAtK(t *testing.T, c vectorCase, tol tolerance) {
	cases := decode[[]struct{ N, C, K int }](t, c.Inputs, "cases")
	want := decode[[]float64](t, c.Outputs, "pass_at_k")
	var got []float64
	for _, pc := range cases {
		v, err := PassAtK(pc.N, pc.C, pc.K)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	assertClose(t, "pass_at_k", got, want, tol)
}

func vecPassAtKMean(t *testing.T, c vectorCase, tol tolerance) {
	nc := decode[[][2]int](t, c.Inputs, "n_c")
	k := decode[int](t, c.Params, "k")
	wantPer := decode[[]float64](t, c.Outputs, "per_problem")
	wantMean := decode[float64](t, c.Outputs, "mean")
	wantP1 := decode[float64](t, c.Outputs, "pass_at_1_mean")
	var probs []Problem
	var samples []ValSample
	for i, p := range nc {
		probs = append(probs, Problem{N: p[0], C: p[1]})
		for j := range p[0] {
			samples = append(samples, ValSample{DataSource: "math", TaskID: fmt.Sprint(i), Correct: j < p[1]})
		}
	}
	per, mean, p1, err := MeanPassAtK(probs, k)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "per_problem", per, wantPer, tol)
	assertClose(t, "mean", []float64{mean}, []float64{wantMean}, tol)
	assertClose(t, "pass_at_1_mean", []float64{p1}, []float64{wantP1}, tol)
	// Through ValidationMetrics, from individual samples.
	m, err := ValidationMetrics(samples, []int{k})
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "val pass@k", []float64{m[fmt.Sprintf("val/math/pass@%d", k)]}, []float64{wantMean}, tol)
	assertClose(t, "val pass@1", []float64{m["val/math/pass@1"]}, []float64{wantP1}, tol)
}
