package estimators

import (
	"fmt"
	"slices"
)

// PassAtK is the unbiased pass@k estimator of one problem with c correct out of n samples
// (Chen et al., 2021): 1 − C(n−c, k)/C(n, k), computed as 1 − Π_{i=n−c+1}^{n} (1 − k/i) so that no
// binomial is formed; 1 when n − c < k. It needs 0 ≤ c ≤ n and 1 ≤ k ≤ n.
func PassAtK(n, c, k int) (float64, error) {
	if n < 1 {
		return 0, fmt.Errorf("pass@k: n = %d samples, need at least 1", n)
	}
	if c < 0 || c > n {
		return 0, fmt.Errorf("pass@k: c = %d correct out of n = %d", c, n)
	}
	if k < 1 || k > n {
		return 0, fmt.Errorf("pass@k: k = %d outside [1, n = %d]", k, n)
	}
	if n-c < k {
		return 1, nil
	}
	prod := 1.0
	for i := n - c + 1; i <= n; i++ {
		prod *= 1 - float64(k)/float64(i)
	}
	return 1 - prod, nil
}

// Problem is the validation record of one problem: N samples, C of them correct.
type Problem struct{ N, C int }

// MeanPassAtK returns the per-problem pass@k, the dataset score (their mean) and the mean
// pass@1 (mean of c/n). An empty problem list gives zeros.
func MeanPassAtK(problems []Problem, k int) (perProblem []float64, mean, passAt1 float64, err error) {
	perProblem = make([]float64, len(problems))
	for i, p := range problems {
		v, err := PassAtK(p.N, p.C, k)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("problem %d: %w", i, err)
		}
		perProblem[i] = v
		mean += v
		passAt1 += float64(p.C) / float64(p.N)
	}
	if len(problems) > 0 {
		mean /= float64(len(problems))
		passAt1 /= float64(len(problems))
	}
	return perProblem, mean, passAt1, nil
}

// ValSample is one validation sample: which problem of which data source, and whether it was correct.
type ValSample struct {
	DataSource string
	TaskID     string
	Correct    bool
}

// UnknownDataSource names samples whose data source is empty.
const UnknownDataSource = "unknown"

// ValidationMetrics groups samples by data source and problem (TaskID) and returns, per data
// source, val/<source>/pass@1 (mean over problems of c/n) and val/<source>/pass@<k> for every k
// in ks (k = 1 is the same number). A k larger than some problem's sample count is an error.
func ValidationMetrics(samples []ValSample, ks []int) (map[string]float64, error) {
	type key struct{ src, task string }
	counts := map[key]*Problem{}
	var sources []string
	var order []key
	for _, s := range samples {
		src := s.DataSource
		if src == "" {
			src = UnknownDataSource
		}
		k := key{src, s.TaskID}
		p, ok := counts[k]
		if !ok {
			p = &Problem{}
			counts[k] = p
			order = append(order, k)
			if !slices.Contains(sources, src) {
				sources = append(sources, src)
			}
		}
		p.N++
		if s.Correct {
			p.C++
		}
	}
	m := map[string]float64{}
	for _, src := range sources {
		var probs []Problem
		for _, k := range order {
			if k.src == src {
				probs = append(probs, *counts[k])
			}
		}
		_, _, p1, err := MeanPassAtK(probs, 1)
		if err != nil {
			return nil, fmt.Errorf("data source %q: %w", src, err)
		}
		m[fmt.Sprintf("val/%s/pass@1", src)] = p1
		for _, k := range ks {
			_, mean, _, err := MeanPassAtK(probs, k)
			if err != nil {
				return nil, fmt.Errorf("data source %q: %w", src, err)
			}
			m[fmt.Sprintf("val/%s/pass@%d", src, k)] = mean
		}
	}
	return m, nil
}
