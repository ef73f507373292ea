package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTransposeEveryPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for rank := 0; rank <= 4; rank++ {
		for _, perm := range permutations(rank) {
			for trial := range 4 {
				dims := randDims(rng, rank, 5, trial > 0)
				src := randData(rng, product(dims))
				want := refTranspose(src, dims, perm)
				got := make([]float64, len(src))
				Transpose(got, src, dims, perm)
				if !slices.Equal(got, want) {
					t.Fatalf("Transpose(dims=%v, perm=%v) = %v, want %v", dims, perm, got, want)
				}
			}
		}
	}
}

func TestTransposeShapes(t *testing.T) {
	// Larger shapes: the hot attention-head permutation (contiguous inner blocks), tiled 2-D
	// transposes with sizes that are not multiples of the tile, and an outer axis around a tile.
	tests := []struct {
		dims, perm []int
	}{
		{[]int{8, 64, 4, 16}, []int{0, 2, 1, 3}},
		{[]int{70, 33}, []int{1, 0}},
		{[]int{300, 257}, []int{1, 0}},
		{[]int{3, 40, 50}, []int{2, 1, 0}},
		{[]int{5, 37, 3, 41}, []int{0, 3, 2, 1}},
		{[]int{2, 3, 64, 65}, []int{1, 0, 3, 2}},
		{[]int{1, 1, 7}, []int{2, 0, 1}},
		{[]int{1, 100, 1, 100}, []int{3, 2, 1, 0}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range tests {
		src := randData(rng, product(tc.dims))
		want := refTranspose(src, tc.dims, tc.perm)
		got := make([]float64, len(src))
		Transpose(got, src, tc.dims, tc.perm)
		if !slices.Equal(got, want) {
			t.Errorf("Transpose(dims=%v, perm=%v) differs from the reference", tc.dims, tc.perm)
		}
		// Also through a 1-byte and a 4-byte element type.
		src8 := make([]int8, len(src))
		for i := range src8 {
			src8[i] = int8(i)
		}
		got8 := make([]int8, len(src))
		Transpose(got8, src8, tc.dims, tc.perm)
		if !slices.Equal(got8, refTranspose(src8, tc.dims, tc.perm)) {
			t.Errorf("Transpose[int8](dims=%v, perm=%v) differs from the reference", tc.dims, tc.perm)
		}
	}
}

func TestBroadcastInDim(t *testing.T) {
	tests := []struct {
		src, dst, axes []int
	}{
		{nil, nil, nil},                      // scalar to scalar
		{nil, []int{3, 4}, nil},              // scalar
		{[]int{1}, []int{3, 4}, []int{1}},    // size-1 vector
		{[]int{3}, []int{3, 4}, []int{0}},    // over rows (leading axis)
		{[]int{4}, []int{3, 4}, []int{1}},    // over columns (last axis)
		{[]int{5}, []int{2, 5, 3}, []int{1}}, // middle axis
		{[]int{1, 5, 1}, []int{2, 5, 3}, []int{0, 1, 2}},
		{[]int{2, 3}, []int{2, 4, 3}, []int{0, 2}},
		{[]int{2, 3}, []int{2, 3}, []int{0, 1}}, // identity
		{[]int{3}, []int{0, 3}, []int{1}},       // empty dst
		{[]int{64}, []int{100, 64}, []int{1}},
		{[]int{100}, []int{100, 64}, []int{0}},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range tests {
		src := randData(rng, product(tc.src))
		got := make([]float64, product(tc.dst))
		BroadcastInDim(got, src, tc.src, tc.dst, tc.axes)
		if want := refBroadcast(src, tc.src, tc.dst, tc.axes); !slices.Equal(got, want) {
			t.Errorf("BroadcastInDim(%v→%v, axes %v) = %v, want %v", tc.src, tc.dst, tc.axes, got, want)
		}
	}
	// Random: dst of rank ≤ 4, src a random ordered subset of its axes, each kept or set to 1.
	for range 300 {
		dst := randDims(rng, rng.IntN(5), 4, true)
		axes := randSubset(rng, len(dst))
		src := make([]int, len(axes))
		for i, a := range axes {
			src[i] = dst[a]
			if rng.IntN(3) == 0 {
				src[i] = 1
			}
		}
		x := randData(rng, product(src))
		got := make([]float64, product(dst))
		BroadcastInDim(got, x, src, dst, axes)
		if want := refBroadcast(x, src, dst, axes); !slices.Equal(got, want) {
			t.Fatalf("BroadcastInDim(%v→%v, axes %v) differs from the reference", src, dst, axes)
		}
	}
}

func TestSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 500 {
		rank := rng.IntN(5)
		dims := randDims(rng, rank, 6, true)
		starts, limits, strides := make([]int, rank), make([]int, rank), make([]int, rank)
		for i, d := range dims {
			starts[i] = rng.IntN(d + 1)
			limits[i] = starts[i] + rng.IntN(d-starts[i]+1)
			strides[i] = 1 + rng.IntN(3)
		}
		src := randData(rng, product(dims))
		want := refSlice(src, dims, starts, limits, strides)
		got := make([]float64, len(want))
		Slice(got, src, dims, starts, limits, strides)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Slice(dims=%v, %v:%v:%v) = %v, want %v", trial, dims, starts, limits, strides, got, want)
		}
	}
}

func TestConcatenate(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 300 {
		rank := 1 + rng.IntN(4)
		base := randDims(rng, rank, 4, true)
		axis := rng.IntN(rank)
		n := 1 + rng.IntN(3)
		srcs := make([][]float64, n)
		dims := make([][]int, n)
		for i := range n {
			dims[i] = slices.Clone(base)
			dims[i][axis] = rng.IntN(4)
			srcs[i] = randData(rng, product(dims[i]))
		}
		want, wantDims := refConcat(srcs, dims, axis)
		got := make([]float64, product(wantDims))
		Concatenate(got, srcs, dims, axis)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: Concatenate(%v, axis %d) = %v, want %v", trial, dims, axis, got, want)
		}
	}
}

func TestIota(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 200 {
		rank := 1 + rng.IntN(4)
		dims := randDims(rng, rank, 5, true)
		axis := rng.IntN(rank)
		got := make([]float32, product(dims))
		Iota(got, dims, axis)
		idx := make([]int, rank)
		for f, v := range got {
			unravel(f, dims, idx)
			if v != float32(idx[axis]) {
				t.Fatalf("Iota(%v, axis %d)[%v] = %v, want %d", dims, axis, idx, v, idx[axis])
			}
		}
	}
	got := make([]int64, 6)
	Iota(got, []int{2, 3}, 1)
	if want := []int64{0, 1, 2, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("Iota([2,3], 1) = %v, want %v", got, want)
	}
}

func TestPad(t *testing.T) {
	tests := []struct {
		dims []int
		axes []PadAxis
	}{
		{nil, nil},
		{[]int{3}, []PadAxis{{1, 2, 0}}},
		{[]int{3}, []PadAxis{{0, 0, 2}}},
		{[]int{4}, []PadAxis{{-1, -2, 0}}}, // crop only: no fill needed
		{[]int{4}, []PadAxis{{-3, 1, 1}}},  // crop into interior padding
		{[]int{2, 3}, []PadAxis{{1, 0, 0}, {0, 1, 1}}},
		{[]int{0, 3}, []PadAxis{{1, 1, 0}, {0, 0, 0}}}, // empty source
		{[]int{3}, []PadAxis{{-3, 0, 0}}},              // everything cropped
	}
	rng := rand.New(rand.NewPCG(13, 14))
	check := func(dims []int, axes []PadAxis) {
		t.Helper()
		src := randData(rng, product(dims))
		want := refPad(src, dims, -7.5, axes)
		got := make([]float64, len(want))
		for i := range got {
			got[i] = 123 // Garbage the kernel must overwrite.
		}
		Pad(got, src, dims, -7.5, axes)
		if !slices.Equal(got, want) {
			t.Fatalf("Pad(%v, %v) = %v, want %v", dims, axes, got, want)
		}
	}
	for _, tc := range tests {
		check(tc.dims, tc.axes)
	}
	for range 500 {
		rank := rng.IntN(4)
		dims := randDims(rng, rank, 5, true)
		axes := make([]PadAxis, rank)
		ok := true
		for i := range axes {
			axes[i] = PadAxis{rng.IntN(7) - 3, rng.IntN(7) - 3, rng.IntN(3)}
		}
		for _, d := range padDims(dims, axes) {
			ok = ok && d >= 0
		}
		if ok {
			check(dims, axes)
		}
	}
}

func TestReverse(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for range 300 {
		rank := rng.IntN(5)
		dims := randDims(rng, rank, 5, true)
		axes := randSubset(rng, rank)
		src := randData(rng, product(dims))
		got := make([]float64, len(src))
		Reverse(got, src, dims, axes)
		if want := refReverse(src, dims, axes); !slices.Equal(got, want) {
			t.Fatalf("Reverse(%v, axes %v) = %v, want %v", dims, axes, got, want)
		}
	}
}

func TestLengthMismatchPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !slices.Contains([]string{fmt.Sprint(r)}, "kernels.Transpose: len(dst)=5, want 6") {
			t.Errorf("recovered %v, want the length message", r)
		}
	}()
	Transpose(make([]float32, 5), make([]float32, 6), []int{2, 3}, []int{1, 0})
}
