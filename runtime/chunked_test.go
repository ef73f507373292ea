package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestChunkedLogProbsMatchPlain compares ChunkedLogProbs (chunks of 3 rows of 16, the last one
// short) with the plain log-softmax and gather: values, and the gradients of a weighted sum of
// them with respect to every parameter, for tied and untied heads.
func TestChunkedLogProbsMatchPlain(t *testing.T) {
	b := testBackend(t)
	for _, tied := range []bool{true, false} {
		cfg := smallGQA()
		cfg.TieEmbeddings = tied
		cfg.Layers = 1
		m, err := NewModel(cfg, 4)
		if err != nil {
			t.Fatal(err)
		}
		const rows, length = 2, 8
		rng := rand.New(rand.NewPCG(5, 6))
		tokens := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
		targets := randomSeqs(rng, cfg.VocabSize, rows*length)[0]
		weights := make([]float32, rows*length)
		for i := range weights {
			weights[i] = float32(rng.NormFloat64())
		}
		vars := m.Variables()
		run := func(chunk int) (lp []float32, grads [][]float32) {
			exec, err := context.NewExec(b, m.Context(), func(ctx *context.Context, in []*Node) []*Node {
				h := m.Forward(ctx, in[0])
				lp := ChunkedLogProbs(h, m.headWeight(ctx, h.Graph()), in[1], chunk)
				loss := ReduceAllSum(Mul(lp, in[2]))
				params := make([]*Node, len(vars))
				for i, v := range vars {
					params[i] = v.ValueGraph(loss.Graph())
				}
				return append([]*Node{lp}, Gradient(loss, params...)...)
			})
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, rows, length),
				tensors.FromFlatDataAndDimensions(targets, rows, length), tensors.FromFlatDataAndDimensions(weights, rows, length))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out[1:] {
				grads = append(grads, tensors.MustCopyFlatData[float32](o))
			}
			return tensors.MustCopyFlatData[float32](out[0]), grads
		}
		lpPlain, gPlain := run(0)
		lpChunk, gChunk := run(3)
		for i := range lpPlain {
			if d := math.Abs(float64(lpPlain[i] - lpChunk[i])); d > 1e-6 {
				t.Fatalf("tied %v: log-prob %d: chunked %v, plain %v", tied, i, lpChunk[i], lpPlain[i])
			}
		}
		worst := 0.0
		for k, p := range m.Params() {
			for i := range gPlain[k] {
				d := math.Abs(float64(gPlain[k][i] - gChunk[k][i]))
				worst = max(worst, d)
				if d > 1e-5+1e-4*math.Abs(float64(gPlain[k][i])) {
					t.Fatalf("tied %v: %s[%d]: chunked gradient %v, plain %v", tied, p.Name, i, gChunk[k][i], gPlain[k][i])
				}
			}
		}
		t.Logf("tied %v: max |chunked − plain gradient| = %.3g", tied, worst)
	}
}

// headReference is the float64 reference of the per-row outputs TestChunkedHead checks, for
// hidden h [n,d], head w [V,d], targets and teacher logits [n,V]: the log-prob of the target,
// the entropy and KL(teacher ‖ model); loss is Σ_i a_i·lp_i + b_i·H_i + c_i·KL_i.
func headReference(h, w, teacher []float64, targets []int32, coef [3][]float64, n, d, V int) (out [3][]float64, loss float64) {
	for k := range out {
		out[k] = make([]float64, n)
	}
	logSoftmax := func(z []float64) []float64 {
		mx := math.Inf(-1)
		for _, v := range z {
			mx = max(mx, v)
		}
		s := 0.0
		for _, v := range z {
			s += math.Exp(v - mx)
		}
		lse := mx + math.Log(s)
		lp := make([]float64, len(z))
		for j, v := range z {
			lp[j] = v - lse
		}
		return lp
	}
	for i := range n {
		z := make([]float64, V)
		for j := range V {
			for c := range d {
				z[j] += h[i*d+c] * w[j*d+c]
			}
		}
		lp, lq := logSoftmax(z), logSoftmax(teacher[i*V:(i+1)*V])
		out[0][i] = lp[targets[i]]
		for j := range V {
			out[1][i] -= math.Exp(lp[j]) * lp[j]
			out[2][i] += math.Exp(lq[j]) * (lq[j] - lp[j])
		}
		for k := range out {
			loss += coef[k][i] * out[k][i]
		}
	}
	return out, loss
}

// TestChunkedHead checks ChunkedHead with three outputs at once (the target's log-prob, the
// entropy, a KL to per-row teacher logits given as an input), in chunks of 3 rows of 10 (the
// last one short) and unchunked: values against a float64 reference, gradients with respect
// to hidden and head against float64 central differences of the reference loss.
func TestChunkedHead(t *testing.T) {
	b := testBackend(t)
	const n, d, V = 10, 6, 13
	rng := rand.New(rand.NewPCG(7, 8))
	normals := func(size int, std float64) []float64 {
		x := make([]float64, size)
		for i := range x {
			x[i] = rng.NormFloat64() * std
		}
		return x
	}
	h, w, teacher := normals(n*d, 1), normals(V*d, 0.7), normals(n*V, 2)
	targets := make([]int32, n)
	for i := range targets {
		targets[i] = int32(rng.IntN(V))
	}
	var coef [3][]float64
	for k := range coef {
		coef[k] = normals(n, 1)
	}
	f32 := func(x []float64) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float32(v)
		}
		return y
	}
	// The reference at the float32-rounded inputs the graph sees.
	r64 := func(x []float64) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(float32(v))
		}
		return y
	}
	h, w, teacher = r64(h), r64(w), r64(teacher)
	for k := range coef {
		coef[k] = r64(coef[k])
	}
	want, _ := headReference(h, w, teacher, targets, coef, n, d, V)
	gradRef := func(x []float64, i int) float64 {
		const eps = 1e-6
		old := x[i]
		x[i] = old + eps
		_, up := headReference(h, w, teacher, targets, coef, n, d, V)
		x[i] = old - eps
		_, down := headReference(h, w, teacher, targets, coef, n, d, V)
		x[i] = old
		return (up - down) / (2 * eps)
	}
	// headOnly differentiates with respect to the head alone (a frozen body under a trained
	// head): the chunked gradient then reads the adjoints from the head's route, not hidden's.
	for _, c := range []struct {
		chunk    int
		headOnly bool
	}{{0, false}, {3, false}, {3, true}} {
		chunk := c.chunk
		exec := MustNewExec(b, func(in []*Node) []*Node {
			hn, wn := Reshape(in[0], 2, n/2, d), in[1]
			outs := ChunkedHead(hn, wn, []*Node{Reshape(in[2], 2, n/2), Reshape(in[3], 2, n/2, V)}, chunk,
				func(z *Node, rows []*Node) []*Node {
					lp, lq := LogSoftmaxLast(z), LogSoftmaxLast(rows[1])
					kl := ReduceSum(Mul(Exp(lq), Sub(lq, lp)), -1)
					return []*Node{LogProbs(z, rows[0]), Entropy(z), kl}
				})
			loss := ReduceAllSum(Mul(Reshape(outs[0], n), in[4]))
			loss = Add(loss, ReduceAllSum(Mul(Reshape(outs[1], n), in[5])))
			loss = Add(loss, ReduceAllSum(Mul(Reshape(outs[2], n), in[6])))
			if c.headOnly {
				return append(outs, Gradient(loss, in[1])...)
			}
			return append(outs, Gradient(loss, in[0], in[1])...)
		})
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(f32(h), n, d), tensors.FromFlatDataAndDimensions(f32(w), V, d),
			tensors.FromFlatDataAndDimensions(targets, n), tensors.FromFlatDataAndDimensions(f32(teacher), n, V),
			tensors.FromFlatDataAndDimensions(f32(coef[0]), n), tensors.FromFlatDataAndDimensions(f32(coef[1]), n),
			tensors.FromFlatDataAndDimensions(f32(coef[2]), n))
		if err != nil {
			t.Fatal(err)
		}
		for k, name := range []string{"log-prob", "entropy", "kl"} {
			got := tensors.MustCopyFlatData[float32](out[k])
			for i := range got {
				if e := math.Abs(float64(got[i]) - want[k][i]); e > 1e-5*(1+math.Abs(want[k][i])) {
					t.Fatalf("chunk %d: %s[%d] = %v, float64 reference %v", chunk, name, i, got[i], want[k][i])
				}
			}
		}
		worst := 0.0
		names, wrt := []string{"hidden", "head"}, [][]float64{h, w}
		if c.headOnly {
			names, wrt = names[1:], wrt[1:]
		}
		for gi, x := range wrt {
			got := tensors.MustCopyFlatData[float32](out[3+gi])
			for i := range got {
				ref := gradRef(x, i)
				e := math.Abs(float64(got[i]) - ref)
				worst = max(worst, e)
				if e > 1e-4*(1+math.Abs(ref)) {
					t.Fatalf("chunk %d: gradient %s[%d] = %v, central difference %v", chunk, names[gi], i, got[i], ref)
				}
			}
		}
		t.Logf("chunk %d, head only %v: max |gradient − float64 central difference| = %.3g", chunk, c.headOnly, worst)
	}
}
