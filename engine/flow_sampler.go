package engine

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	graph "github.com/gomlx/gomlx/pkg/core/graph"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// flowValSamples is the number of points an evaluation of a flow role draws.
const flowValSamples = 256

// flowSampler draws points from a velocity-model role's current weights: the
// ODE sampler of the evaluation, the SDE sampler of Flow-GRPO's rollouts.
type flowSampler struct {
	// vel evaluates v_θ(x, σ).
	vel *runtime.Evaluator
	// prod computes the step log-probs of transitions (the sampler's log-probs;
	// used by Flow-GRPO's rollouts only).
	prod *specializations.FlowProducer
}

// newFlowSampler prepares the samplers of model m, whose role runs spec.
func newFlowSampler(b *runtime.Backend, spec specializations.Flow, m *runtime.VelocityModel) (*flowSampler, error) {
	vel, err := runtime.NewEvaluator(b, m, func(ctx *context.Context, m *runtime.VelocityModel, batch map[string]*graph.Node) map[string]*graph.Node {
		return map[string]*graph.Node{"v": m.Forward(ctx, batch["x"], batch["sigma"])}
	})
	if err != nil {
		return nil, err
	}
	prod, err := specializations.NewFlowProducer(b, spec, m)
	if err != nil {
		return nil, err
	}
	return &flowSampler{vel: vel, prod: prod}, nil
}

// velocityAt evaluates v_θ at points xs (N×D, row-major) and noise levels sigma.
func (f *flowSampler) velocityAt(xs []float32, sigma []float32) ([]float32, error) {
	n := len(sigma)
	out, err := f.vel.Run(map[string]*tensors.Tensor{
		"x":     tensors.FromFlatDataAndDimensions(append([]float32{}, xs...), n, len(xs)/n),
		"sigma": tensors.FromFlatDataAndDimensions(append([]float32{}, sigma...), n),
	})
	if err != nil {
		return nil, fmt.Errorf("velocity: %w", err)
	}
	return tensors.CopyFlatData[float32](out["v"])
}

// euler integrates the probability-flow ODE from noise (σ = 1) to data
// (σ = 0) in flow_steps Euler steps for n points drawn from seed.
func (f *flowSampler) euler(n, steps int, seed uint64) ([]float32, error) {
	rng := rand.New(rand.NewPCG(seed, 0xf10))
	x := make([]float32, 2*n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	sig := make([]float32, n)
	for k := range steps {
		s, sn := 1-float64(k)/float64(steps), 1-float64(k+1)/float64(steps)
		for i := range sig {
			sig[i] = float32(s)
		}
		v, err := f.velocityAt(x, sig)
		if err != nil {
			return nil, err
		}
		for i := range x {
			x[i] += float32(sn-s) * v[i]
		}
	}
	return x, nil
}

// flowRollout samples rollout_batch_size groups of n_samples_per_prompt
// trajectories with Flow-GRPO's SDE sampler (Liu et al., 2025); each transition is a
// row (trajectories = x, x_next, σ, σ_next), its reward that of the final
// point, its sampler_log_probs the step log-prob under the sampling weights.
func (f *flowSampler) flowRollout(k schema.Knobs, reward *tasks.Reward, role string, seed uint64) (*batch, error) {
	G, n, K := k.RolloutBatchSize, max(k.NSamplesPerPrompt, 1), max(k.FlowSteps, 1)
	N, a := G*n, k.FlowNoiseLevel
	sigmaMax := 1 - 1/float64(K)
	rng := rand.New(rand.NewPCG(seed, 0xf1a))
	x := make([]float32, 2*N)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	type tr struct{ x, xn [2]float32 }
	trans := make([][]tr, K)
	sig := make([]float32, N)
	for step := range K {
		s, sn := 1-float64(step)/float64(K), 1-float64(step+1)/float64(K)
		for i := range sig {
			sig[i] = float32(s)
		}
		v, err := f.velocityAt(x, sig)
		if err != nil {
			return nil, err
		}
		den := s
		if den >= 1 {
			den = sigmaMax
		}
		dt := sn - s
		st := a * math.Sqrt(s/(1-den))
		std := st * math.Sqrt(-dt)
		trans[step] = make([]tr, N)
		for i := range N {
			var t tr
			for d := range 2 {
				xi, vi := float64(x[2*i+d]), float64(v[2*i+d])
				mean := xi + (vi+a*a/2/(1-den)*(xi+(1-s)*vi))*dt
				t.x[d] = x[2*i+d]
				x[2*i+d] = float32(mean + std*rng.NormFloat64())
				t.xn[d] = x[2*i+d]
			}
			trans[step][i] = t
		}
	}
	d := &rollout.Rollout{Row: map[string][]float64{}}
	out := &batch{metrics: map[string]float64{}}
	traj := make([][]float32, 0, N*K)
	for i := range N {
		rew, ok, err := reward.ScorePoint(x[2*i : 2*i+2])
		if err != nil {
			return nil, err
		}
		c := 0.0
		if ok {
			c = 1
		}
		for step := range K {
			t := trans[step][i]
			s, sn := 1-float64(step)/float64(K), 1-float64(step+1)/float64(K)
			traj = append(traj, []float32{t.x[0], t.x[1], t.xn[0], t.xn[1], float32(s), float32(sn)})
			d.Tokens = append(d.Tokens, []int32{})
			d.Reward = append(d.Reward, rew)
			d.GroupID = append(d.GroupID, fmt.Sprintf("g%d", i/n))
			d.TaskID = append(d.TaskID, fmt.Sprintf("g%d", i/n))
			d.Role = append(d.Role, role)
			d.DataSource = append(d.DataSource, "mixture2d")
			d.Traj = append(d.Traj, i)
			d.Row[rollout.KeyIsCorrect] = append(d.Row[rollout.KeyIsCorrect], c)
		}
		out.genTokens += K
	}
	if err := specializations.SetRowVectors(d, rollout.KeyTrajectories, traj); err != nil {
		return nil, err
	}
	if err := f.prod.Produce(d, specializations.BatchOptions{MicroBatchSize: k.MicroBatchSize},
		map[string]string{rollout.KeyStepLogProbs: rollout.KeySamplerLogProbs}); err != nil {
		return nil, fmt.Errorf("sampler log-probs: %w", err)
	}
	out.data = d
	return out, nil
}

// flowSamples lays out dataset points as rows with the wide samples column.
func flowSamples(exs []tasks.Example, role string) (*batch, error) {
	d := &rollout.Rollout{Row: map[string][]float64{}}
	pts := make([][]float32, 0, len(exs))
	for _, ex := range exs {
		d.Tokens = append(d.Tokens, []int32{})
		d.TaskID = append(d.TaskID, ex.ID)
		d.Role = append(d.Role, role)
		pts = append(pts, ex.Point)
	}
	if err := specializations.SetRowVectors(d, rollout.KeySamples, pts); err != nil {
		return nil, err
	}
	return &batch{data: d, exs: exs, metrics: map[string]float64{}}, nil
}

// flowEval draws 256 points with the Euler ODE sampler and scores them with
// the task reward: val/accuracy is the fraction within 3σ of a target mode,
// val/log_density the mixture's mean log-density at the points.
func flowEval(f *flowSampler, k schema.Knobs, reward *tasks.Reward, task tasks.Task, seed uint64) (map[string]float64, error) {
	const n = flowValSamples
	pts, err := f.euler(n, max(k.FlowSteps, 1), seed)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sum, correct, dens := 0.0, 0.0, 0.0
	mix, isMix := task.(*tasks.Mixture)
	for i := range n {
		r, ok, err := reward.ScorePoint(pts[2*i : 2*i+2])
		if err != nil {
			return nil, err
		}
		sum += r
		if ok {
			correct++
		}
		if isMix {
			ld, err := mix.LogDensity(pts[2*i : 2*i+2])
			if err != nil {
				return nil, err
			}
			dens += ld
		}
	}
	m["val/accuracy"], m["val/reward_mean"] = correct/n, sum/n
	if isMix {
		m["val/log_density"] = dens / n
	}
	return m, nil
}
