package runtime

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph-building code reads better unqualified.
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestRopeReverseMatchesMasked: the rotation through Reverse (backends that have it) and the one
// through masked sums (SimpleGo) give the same bits (on XLA: to 1e-6·max(1, |value|)), forward
// and in the gradient, and both match a float64 rotate-half written out here.
func TestRopeReverseMatchesMasked(t *testing.T) {
	b := testBackend(t)
	const batch, length, heads, hd = 2, 3, 2, 8
	rng := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, batch*length*heads*hd)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	pos := make([]int32, batch*length)
	for i := range pos {
		pos[i] = int32(rng.IntN(50))
	}
	invFreq := Config{HeadDimension: hd, RopeTheta: 10000}.RopeInvFreq()
	run := func(masked bool) [][]float32 {
		exec := MustNewExec(b, func(x, pos *Node) []*Node {
			r := ropeTables(pos, invFreq)
			if !masked && r.signedSin == nil {
				t.Skip("the backend has no Reverse")
			}
			if masked {
				r.signedSin = nil
			}
			y := r.apply(x)
			// A weighted sum, so that the gradient differs per element.
			w := Iota(x.Graph(), y.Shape(), 3)
			loss := ReduceAllSum(Mul(y, Add(ConvertDType(w, y.DType()), Const(x.Graph(), float32(0.5)))))
			return []*Node{y, Gradient(loss, x)[0]}
		})
		out := exec.MustExec(tensors.FromFlatDataAndDimensions(x, batch, length, heads, hd), tensors.FromFlatDataAndDimensions(pos, batch, length))
		return [][]float32{tensors.MustCopyFlatData[float32](out[0]), tensors.MustCopyFlatData[float32](out[1])}
	}
	rev, masked := run(false), run(true)
	// XLA fuses and reorders float ops (the masked sums and the Reverse compile to different
	// fusions, whose gradient sums may round differently: one float32 ulp at gradient[1] with
	// XLA's CPU plugin): there the two agree to 1e-6 relative (absolute below 1), elsewhere bit
	// for bit.
	tol := 0.0
	if backendIsXLA(b) {
		tol = 1e-6
	}
	for k, name := range []string{"rotation", "gradient"} {
		for i := range rev[k] {
			if tol == 0 {
				if math.Float32bits(rev[k][i]) != math.Float32bits(masked[k][i]) {
					t.Fatalf("%s[%d]: Reverse %v, masked sums %v", name, i, rev[k][i], masked[k][i])
				}
			} else if d := math.Abs(float64(rev[k][i]) - float64(masked[k][i])); d > tol*math.Max(1, math.Abs(float64(masked[k][i]))) {
				t.Fatalf("%s[%d]: Reverse %v, masked sums %v (XLA: tolerance %g·max(1, |value|))", name, i, rev[k][i], masked[k][i], tol)
			}
		}
	}
	half := hd / 2
	for bt := range batch * length {
		for h := range heads {
			for i := range hd {
				j := i % half
				ang := float64(pos[bt]) * invFreq[j]
				v := x[(bt*heads+h)*hd:]
				var rot float64
				if i < half {
					rot = -float64(v[i+half])
				} else {
					rot = float64(v[i-half])
				}
				want := float64(v[i])*math.Cos(ang) + rot*math.Sin(ang)
				if got := rev[0][(bt*heads+h)*hd+i]; math.Abs(float64(got)-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("rotation at row %d head %d dim %d: %v, float64 %v", bt, h, i, got, want)
				}
			}
		}
	}
}
