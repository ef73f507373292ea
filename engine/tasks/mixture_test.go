package tasks

import (
	"math"
	"slices"
	"testing"
)

func TestMixtureSplits(t *testing.T) {
	m, err := NewMixture2D(MixtureConfig{}, 4000, 400, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Kinds(), []Kind{KindFlow}) || m.Name() != "mixture2d" {
		t.Fatalf("Name %q Kinds %v", m.Name(), m.Kinds())
	}
	train, val := m.Train(), m.Validation()
	if len(train) != 4000 || len(val) != 400 {
		t.Fatalf("sizes %d/%d", len(train), len(val))
	}
	seen := map[[2]float32]bool{}
	for _, ex := range train {
		seen[[2]float32(ex.Point)] = true
	}
	for _, ex := range val {
		if seen[[2]float32(ex.Point)] {
			t.Fatalf("validation point %v is also in train", ex.Point)
		}
	}
	// Independent check of the distribution: every point lies within 5σ
	// of a mean on the radius-2 circle at angle 2πk/8, and the modes are
	// used about equally (each 1/8 ± 5 binomial standard deviations).
	counts := make([]int, 8)
	for _, ex := range train {
		best, arg := math.Inf(1), -1
		for k := range 8 {
			a := 2 * math.Pi * float64(k) / 8
			d := math.Hypot(float64(ex.Point[0])-2*math.Cos(a), float64(ex.Point[1])-2*math.Sin(a))
			if d < best {
				best, arg = d, k
			}
		}
		if best > 5*0.1 {
			t.Fatalf("point %v is %.3f from the nearest mode", ex.Point, best)
		}
		counts[arg]++
	}
	sd := math.Sqrt(4000 * (1.0 / 8) * (7.0 / 8))
	for k, c := range counts {
		if math.Abs(float64(c)-500) > 5*sd {
			t.Errorf("mode %d has %d points, want about 500", k, c)
		}
	}
	// The per-axis spread around the assigned mean is the configured σ.
	var ss float64
	for _, ex := range train {
		best := math.Inf(1)
		for _, mu := range m.Means() {
			dx, dy := float64(ex.Point[0])-mu[0], float64(ex.Point[1])-mu[1]
			best = min(best, dx*dx+dy*dy)
		}
		ss += best
	}
	if std := math.Sqrt(ss / (2 * 4000)); math.Abs(std-0.1) > 0.005 {
		t.Errorf("per-axis std %.4f, want 0.1", std)
	}
}

func TestMixtureReward(t *testing.T) {
	m, err := NewMixture2D(MixtureConfig{}, 10, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Target(), []int{0, 2, 4, 6}) {
		t.Fatalf("default target %v", m.Target())
	}
	chord := 2 * 2 * math.Sin(math.Pi/8) // distance between neighbouring means
	tests := []struct {
		name    string
		p       []float32
		reward  float64
		correct bool
	}{
		{"target mean 0", []float32{2, 0}, 0, true},
		{"target mean 2", []float32{0, 2}, 0, true},
		{"within 3σ", []float32{2.25, 0}, -0.25, true},
		{"just outside 3σ", []float32{2.35, 0}, -0.35, false},
		{"non-target mode 1", []float32{float32(math.Sqrt2), float32(math.Sqrt2)}, -chord, false},
		{"origin", []float32{0, 0}, -2, false},
		{"far away", []float32{100, 0}, -98, false},
	}
	for _, tc := range tests {
		r, ok, err := m.ScorePoint(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(r-tc.reward) > 1e-6 || ok != tc.correct {
			t.Errorf("%s: ScorePoint(%v) = %v, %v; want %v, %v", tc.name, tc.p, r, ok, tc.reward, tc.correct)
		}
	}
	for _, p := range [][]float32{{float32(math.NaN()), 0}, {float32(math.Inf(1)), float32(math.NaN())}, {0, float32(math.Inf(-1))}} {
		if r, ok, err := m.ScorePoint(p); err != nil || !math.IsNaN(r) || ok {
			t.Errorf("ScorePoint(%v) = %v, %v, %v; want NaN, false, nil", p, r, ok, err)
		}
	}
	if _, _, err := m.ScorePoint([]float32{1, 2, 3}); err == nil {
		t.Error("3-D point accepted")
	}
	// A custom target: only mode 1.
	one, err := NewMixture2D(MixtureConfig{Target: []int{1}}, 1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok, _ := one.ScorePoint([]float32{2, 0}); math.Abs(r+chord) > 1e-6 || ok {
		t.Errorf("target {1}: ScorePoint(mode 0) = %v, %v; want %v, false", r, ok, -chord)
	}
	for _, cfg := range []MixtureConfig{{Target: []int{8}}, {Target: []int{}}, {Std: -1}, {Modes: -2}} {
		if _, err := NewMixture2D(cfg, 1, 1, 1); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestMixtureLogDensity(t *testing.T) {
	m, err := NewMixture2D(MixtureConfig{}, 1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Reference: the density summed directly in float64.
	ref := func(x, y float64) float64 {
		var p float64
		for k := range 8 {
			a := 2 * math.Pi * float64(k) / 8
			dx, dy := x-2*math.Cos(a), y-2*math.Sin(a)
			p += math.Exp(-(dx*dx+dy*dy)/(2*0.01)) / (2 * math.Pi * 0.01) / 8
		}
		return math.Log(p)
	}
	for _, p := range [][2]float32{{2, 0}, {1.9, 0.1}, {0, 0}, {1.4, 1.5}, {-0.3, -2.1}} {
		got, err := m.LogDensity(p[:])
		if err != nil {
			t.Fatal(err)
		}
		want := ref(float64(p[0]), float64(p[1]))
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("LogDensity(%v) = %v, want %v", p, got, want)
		}
	}
	// Far from every mode the direct sum underflows to −Inf; log-sum-exp
	// stays finite and equals the nearest mode's term.
	got, _ := m.LogDensity([]float32{50, 0})
	want := -(48.0*48.0)/(2*0.01) - math.Log(8) - math.Log(2*math.Pi*0.01)
	if math.Abs(got-want) > 1e-9*math.Abs(want) {
		t.Errorf("far LogDensity = %v, want %v", got, want)
	}
	if _, err := m.LogDensity([]float32{1}); err == nil {
		t.Error("1-D point accepted")
	}
}
