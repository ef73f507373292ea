package loss

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// topKRef is the float64 reference of the teacher's summary and of the bucketed divergence
// at one position: the teacher's k most likely tokens (ties to the smaller id), the rest as
// one bucket, and the generalized JSD of β between the two bucketed distributions.
func topKRef(student, teacher []float64, k int, beta, tau float64) (summary []float64, d float64) {
	s, q := softmaxRef(student, tau), softmaxRef(teacher, tau)
	ids := make([]int, len(q))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return q[ids[a]] > q[ids[b]] })
	qb, sb := make([]float64, k+1), make([]float64, k+1)
	qb[k], sb[k] = 1, 1
	for i, id := range ids[:k] {
		qb[i], sb[i] = q[id], s[id]
		qb[k] -= q[id]
		sb[k] -= s[id]
	}
	restQ := 0.0 // summed directly, not as 1 − Σ top-k
	for _, id := range ids[k:] {
		restQ += q[id]
	}
	for i := range k {
		summary = append(summary, math.Log(qb[i]))
	}
	summary = append(summary, math.Log(restQ))
	for _, id := range ids[:k] {
		summary = append(summary, float64(id))
	}
	switch beta {
	case 0:
		return summary, klRef(qb, sb)
	case 1:
		return summary, klRef(sb, qb)
	}
	m := make([]float64, k+1)
	for i := range m {
		m[i] = beta*qb[i] + (1-beta)*sb[i]
	}
	return summary, beta*klRef(qb, m) + (1-beta)*klRef(sb, m)
}

// TestGeneralizedJSDTopKReference checks the teacher's top-k summary and the bucketed
// divergence against float64 references, and that k = V−1 (every token its own bucket) is
// the exact divergence of GeneralizedJSDTokens.
func TestGeneralizedJSDTopKReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const b, tt, v = 2, 3, 6
	student, teacher := randomArr(rng, -4, 4, b, tt, v), randomArr(rng, -4, 4, b, tt, v)
	teacher.data[3] = teacher.data[1] // a tie: the smaller id comes first
	targets := arr{data: []float64{0, 5, 2, 3, 1, 4}, dims: []int{b, tt}}
	for _, tau := range []float64{0.8, 1} {
		for _, k := range []int{1, 2, v - 1} {
			for _, beta := range []float64{0, 0.3, 1} {
				cfg := GKDConfig{Beta: beta, Temperature: tau}
				out := runGraph(t, []arr{student, teacher, targets}, func(in []*Node) (graphOutputs, error) {
					sum, err := TeacherTopK(in[1], k, tau)
					if err != nil {
						return nil, err
					}
					d, lp, err := GeneralizedJSDTopKAndLogProbs(in[0], sum, in[2], k, cfg)
					if err != nil {
						return nil, err
					}
					full, err := GeneralizedJSDTokens(in[0], in[1], cfg)
					if err != nil {
						return nil, err
					}
					return graphOutputs{"summary": sum, "d": d, "lp": lp, "full": full}, nil
				})
				var wantSum, wantD, wantLP []float64
				for pos := range b * tt {
					row := student.data[pos*v : (pos+1)*v]
					s, d := topKRef(row, teacher.data[pos*v:(pos+1)*v], k, beta, tau)
					wantSum = append(wantSum, s...)
					wantD = append(wantD, d)
					wantLP = append(wantLP, math.Log(softmaxRef(row, 1)[int(targets.data[pos])]))
				}
				label := fmt.Sprintf("τ %g k %d β %g", tau, k, beta)
				expectArr(t, tight, label+" summary", out["summary"], arr{data: wantSum, dims: []int{b, tt, 2*k + 1}})
				expectArr(t, tight, label+" divergence", out["d"], arr{data: wantD, dims: []int{b, tt}})
				expectArr(t, tight, label+" target log-probs", out["lp"], arr{data: wantLP, dims: []int{b, tt}})
				if k == v-1 {
					expectArr(t, tight, label+" against the exact divergence", out["d"], out["full"])
				}
			}
		}
	}
}

// TestGeneralizedJSDTopKGradient checks the student's gradient of the bucketed divergence
// against finite differences (the teacher's summary is an input, without gradient).
func TestGeneralizedJSDTopKGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const v, k = 6, 2
	student, teacher := randomArr(rng, -3, 3, 2, 3, v), randomArr(rng, -3, 3, 2, 3, v)
	var sum []float64
	for pos := range 6 {
		s, _ := topKRef(student.data[pos*v:(pos+1)*v], teacher.data[pos*v:(pos+1)*v], k, 0.5, 1.7)
		sum = append(sum, s...)
	}
	summary := arr{data: sum, dims: []int{2, 3, 2*k + 1}}
	for _, beta := range []float64{0, 0.3, 1} {
		t.Run(fmt.Sprintf("beta%g", beta), func(t *testing.T) {
			fdCheck(t, []arr{student, summary}, 0, func(in []*Node) (*Node, error) {
				d, err := GeneralizedJSDTopK(in[0], in[1], k, GKDConfig{Beta: beta, Temperature: 1.7})
				if err != nil {
					return nil, err
				}
				return ReduceAllSum(d), nil
			})
		})
	}
}

// TestGeneralizedJSDTopKErrors: a k outside 1 … V−1 or a summary of the wrong width is an
// error that says so.
func TestGeneralizedJSDTopKErrors(t *testing.T) {
	logits := arr{data: make([]float64, 2*4), dims: []int{2, 4}}
	for _, tc := range []struct {
		name string
		run  func(in []*Node) error
		want string
	}{
		{"teacher k 0", func(in []*Node) error { _, err := TeacherTopK(in[0], 0, 1); return err }, "must be in 1 … 3"},
		{"teacher k V", func(in []*Node) error { _, err := TeacherTopK(in[0], 4, 1); return err }, "must be in 1 … 3"},
		{"student k V", func(in []*Node) error {
			_, err := GeneralizedJSDTopK(in[0], in[0], 4, DefaultGKDConfig())
			return err
		}, "must be in 1 … 3"},
		{"width", func(in []*Node) error {
			_, err := GeneralizedJSDTopK(in[0], in[0], 2, DefaultGKDConfig())
			return err
		}, "want [..., 5]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runGraphErr(backend(t), []arr{logits}, func(in []*Node) (graphOutputs, error) {
				return nil, tc.run(in)
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestTeacherTopKBlocks: ranking blocks first (padded to a whole block, over several levels
// when the blocks are narrow) finds the same k tokens as ranking every token, also when the
// k tokens crowd into few blocks.
func TestTeacherTopKBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const v, tau = 50, 1.3
	logits := randomArr(rng, -4, 4, 3, v)
	for i := 10; i < 16; i++ { // row 1: the six largest in one block of 8
		logits.data[v+i] = 6 + float64(i)/10
	}
	for _, tc := range []struct{ k, block int }{{1, 8}, {5, 8}, {7, 8}, {5, 7}, {3, 64}, {1, 2}, {2, 3}, {4, 2}, {6, 2}} {
		out := runGraph(t, []arr{logits}, func(in []*Node) (graphOutputs, error) {
			s, err := teacherTopK(in[0], tc.k, tau, tc.block)
			return graphOutputs{"summary": s}, err
		})
		var want []float64
		for r := range 3 {
			row := logits.data[r*v : (r+1)*v]
			s, _ := topKRef(row, row, tc.k, 0.5, tau)
			want = append(want, s...)
		}
		expectArr(t, tight, fmt.Sprintf("k %d block %d", tc.k, tc.block), out["summary"], arr{data: want, dims: []int{3, 2*tc.k + 1}})
	}
}
