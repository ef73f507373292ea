package tasks

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// MixtureConfig shapes the mixture2d task: an equal-weight mixture of
// isotropic 2-D Gaussians whose means sit evenly on a circle.
type MixtureConfig struct {
	// Modes is the number of Gaussians. Default 8.
	Modes int
	// Radius of the circle of means. Default 2, so the data has roughly
	// the scale of the N(0, I) noise flow matching starts from.
	Radius float64
	// Std of each Gaussian. Default 0.1.
	Std float64
	// Target are the modes the Flow-GRPO reward pulls samples towards.
	// Default: the even modes (half of the mass).
	Target []int
}

// Mixture is the mixture2d task. Examples carry only Point (x, y); they
// have no text. Its reward for Flow-GRPO (ScorePoint) is the negative
// Euclidean distance from a generated point to the nearest target mode's
// mean: 0 at a target mean, falling linearly with distance, so group
// normalisation sees a smooth signal even for samples far from every mode
// (a log-density would put them at −distance²/(2σ²), hundreds below).
// A point is "correct" within 3σ of a target mean.
type Mixture struct {
	cfg        MixtureConfig
	means      [][2]float64
	train, val []Example
}

// NewMixture2D builds the mixture2d task with seeded splits of independent
// samples (validation drawn first, so it does not change with trainSize).
func NewMixture2D(cfg MixtureConfig, trainSize, valSize, seed int) (*Mixture, error) {
	if cfg.Modes == 0 {
		cfg.Modes = 8
	}
	if cfg.Radius == 0 {
		cfg.Radius = 2
	}
	if cfg.Std == 0 {
		cfg.Std = 0.1
	}
	if cfg.Target == nil {
		for k := 0; k < cfg.Modes; k += 2 {
			cfg.Target = append(cfg.Target, k)
		}
	}
	if cfg.Modes < 1 || !(cfg.Radius > 0) || !(cfg.Std > 0) {
		return nil, fmt.Errorf("mixture2d: need modes ≥ 1, radius > 0, std > 0 (got %d, %g, %g)", cfg.Modes, cfg.Radius, cfg.Std)
	}
	if len(cfg.Target) == 0 {
		return nil, fmt.Errorf("mixture2d: empty target mode list")
	}
	for _, k := range cfg.Target {
		if k < 0 || k >= cfg.Modes {
			return nil, fmt.Errorf("mixture2d: target mode %d outside 0…%d", k, cfg.Modes-1)
		}
	}
	if trainSize < 1 || valSize < 1 {
		return nil, fmt.Errorf("mixture2d: split sizes must be ≥ 1 (train %d, validation %d)", trainSize, valSize)
	}
	m := &Mixture{cfg: cfg}
	m.cfg.Target = slices.Clone(cfg.Target)
	for k := range cfg.Modes {
		a := 2 * math.Pi * float64(k) / float64(cfg.Modes)
		m.means = append(m.means, [2]float64{cfg.Radius * math.Cos(a), cfg.Radius * math.Sin(a)})
	}
	r := newRand("mixture2d", seed)
	m.val = m.sample(r, "validation", valSize)
	m.train = m.sample(r, "train", trainSize)
	return m, nil
}

// sample draws n points: a uniform mode, then its Gaussian.
func (m *Mixture) sample(r *rand.Rand, split string, n int) []Example {
	out := make([]Example, n)
	for i := range out {
		mu := m.means[r.IntN(len(m.means))]
		out[i] = Example{
			ID:         fmt.Sprintf("mixture2d/%s/%d", split, i),
			DataSource: "mixture2d",
			Point: []float32{
				float32(mu[0] + m.cfg.Std*r.NormFloat64()),
				float32(mu[1] + m.cfg.Std*r.NormFloat64()),
			},
		}
	}
	return out
}

// Name is "mixture2d".
func (m *Mixture) Name() string { return "mixture2d" }

// Kinds is flow only.
func (m *Mixture) Kinds() []Kind { return []Kind{KindFlow} }

// Train returns the training points.
func (m *Mixture) Train() []Example { return slices.Clone(m.train) }

// Validation returns the held-out points.
func (m *Mixture) Validation() []Example { return slices.Clone(m.val) }

// Means returns the mode means, mode k at angle 2πk/Modes.
func (m *Mixture) Means() [][2]float64 { return slices.Clone(m.means) }

// Std is the standard deviation of every mode.
func (m *Mixture) Std() float64 { return m.cfg.Std }

// Target returns the target modes of the reward.
func (m *Mixture) Target() []int { return slices.Clone(m.cfg.Target) }

// ScorePoint is the Flow-GRPO reward of a generated point: minus the
// distance to the nearest target mean; correct within 3σ of it. A
// non-finite point gets a NaN reward, so divergence is not hidden.
func (m *Mixture) ScorePoint(p []float32) (float64, bool, error) {
	if len(p) != 2 {
		return 0, false, fmt.Errorf("mixture2d: point has %d values, want 2", len(p))
	}
	best := math.Inf(1)
	for _, k := range m.cfg.Target {
		best = min(best, math.Hypot(float64(p[0])-m.means[k][0], float64(p[1])-m.means[k][1]))
	}
	if !finite(p[0]) || !finite(p[1]) {
		best = math.NaN() // Hypot(±Inf, NaN) is +Inf: say NaN plainly
	}
	return -best, best <= 3*m.cfg.Std, nil
}

// LogDensity is the log-density of the whole mixture at p, a quality
// measure of generated samples (higher: closer to the data).
func (m *Mixture) LogDensity(p []float32) (float64, error) {
	if len(p) != 2 {
		return 0, fmt.Errorf("mixture2d: point has %d values, want 2", len(p))
	}
	s2 := m.cfg.Std * m.cfg.Std
	terms := make([]float64, len(m.means))
	top := math.Inf(-1)
	for k, mu := range m.means {
		dx, dy := float64(p[0])-mu[0], float64(p[1])-mu[1]
		terms[k] = -(dx*dx + dy*dy) / (2 * s2)
		top = max(top, terms[k])
	}
	// log-sum-exp around the largest term, so far points do not underflow.
	var sum float64
	for _, t := range terms {
		sum += math.Exp(t - top)
	}
	return top + math.Log(sum) - math.Log(float64(len(m.means))) - math.Log(2*math.Pi*s2), nil
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
