package cpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// withOffHeap stores buffers of at least min bytes in mappings for the test (the race detector
// build keeps them all on the Go heap by default: race.go).
func withOffHeap(t *testing.T, min int) {
	if defaultOffHeapMin == 0 {
		t.Skip("no memory mappings on this system")
	}
	old := offHeapMin
	offHeapMin = min
	t.Cleanup(func() { offHeapMin = old })
}

// TestIntermediatesMappedOutputsOnHeap: a program's large intermediates are mappings, all back
// in the pool when it returns, reused by the next execution without a new mapping; its outputs
// are Go slices (the caller may keep them as long as it likes); the values are exact.
func TestIntermediatesMappedOutputsOnHeap(t *testing.T) {
	withOffHeap(t, 64<<10)
	b := &Backend{}
	const n = 100_000 // 400 kB a buffer
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i%97) / 97
	}
	vec := shapes.Make(dtypes.Float32, n)
	bld := b.Builder(t.Name())
	x := must(bld.Parameter("x", vec, nil))
	// Exp(x) and its square are intermediates; the sum and the difference are the outputs.
	e := must(bld.Exp(x))
	sq := must(bld.Mul(e, e))
	diff := must(bld.Sub(sq, e))
	sum := must(bld.ReduceSum(sq, 0))
	exe, err := bld.Compile([]backends.Op{diff, sum}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mapsAfterFirst int
	for run := range 3 {
		in := mustBuffer(t, b, xs, n)
		outs, err := exe.Execute([]backends.Buffer{in}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o.(*Buffer).mem != nil {
				t.Errorf("run %d: output %d is a mapping, not a Go slice", run, i)
			}
		}
		st := b.pool.stats()
		if st.Maps == 0 {
			t.Fatalf("run %d: no intermediate was mapped: %+v", run, st)
		}
		if st.InUse != 0 {
			t.Errorf("run %d: %d bytes of mappings still in use after the execution", run, st.InUse)
		}
		if st.Total > st.PeakInUse {
			t.Errorf("run %d: %d bytes mapped, more than the %d ever in use", run, st.Total, st.PeakInUse)
		}
		if run == 0 {
			mapsAfterFirst = st.Maps
		} else if st.Maps != mapsAfterFirst {
			t.Errorf("run %d mapped again (%d mappings, %d after the first run): the pool was not reused", run, st.Maps, mapsAfterFirst)
		}
		gotDiff := readFloats(t, b, outs[0])
		var wantSum float64
		for i, v := range xs {
			ev := float32(math.Exp(float64(v)))
			// Exp may differ from float64's in the last bit: compare within float32 rounding.
			if want := ev*ev - ev; math.Abs(float64(gotDiff[i]-want)) > 1e-6*math.Abs(float64(want))+1e-6 {
				t.Fatalf("run %d: exp(x)²-exp(x) at %d = %v, want %v", run, i, gotDiff[i], want)
			}
			wantSum += float64(ev) * float64(ev)
		}
		// A float32 sum of 100,000 terms: within 1e-4 of the float64 one.
		if got := float64(readFloats(t, b, outs[1])[0]); math.Abs(got-wantSum) > 1e-4*wantSum {
			t.Errorf("run %d: sum = %v, float64 reference %v", run, got, wantSum)
		}
		for _, o := range append(outs, in) {
			if err := b.BufferFinalize(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.Finalize()
	if st := b.pool.stats(); st.Total != 0 || st.Pooled != 0 {
		t.Errorf("after Finalize: %+v, want nothing mapped", st)
	}
}

// TestPoolMappedBound: the pool reuses a released mapping of the size, or one at most a
// quarter larger, and unmaps pooled ones rather than map beyond the most ever in use.
func TestPoolMappedBound(t *testing.T) {
	withOffHeap(t, 4096)
	var p bufferPool
	defer p.drain()
	const mb = 1 << 20
	a := p.newBuffer(shapes.Make(dtypes.Float32, mb/4)) // 1 MiB
	b := p.newBuffer(shapes.Make(dtypes.Float32, mb/4))
	if a.mem == nil || b.mem == nil {
		t.Fatal("1 MiB buffers were not mapped")
	}
	p.putBuffer(a)
	p.putBuffer(b)
	if st := p.stats(); st.InUse != 0 || st.Pooled != 2*mb || st.PeakInUse != 2*mb {
		t.Fatalf("after two puts: %+v", st)
	}
	// An int32 buffer 10 % smaller takes a pooled mapping: dtypes share them.
	c := p.newBuffer(shapes.Make(dtypes.Int32, mb/4*9/10))
	if st := p.stats(); st.Maps != 2 {
		t.Errorf("a buffer 10%% smaller was mapped anew: %+v", st)
	}
	// 3 MiB fits in no pooled mapping: the remaining 1 MiB one is unmapped first, so that no
	// more than the 4 MiB now in use is mapped.
	d := p.newBuffer(shapes.Make(dtypes.Float32, 3*mb/4))
	if st := p.stats(); st.Total != 4*mb || st.Pooled != 0 || st.Unmaps != 1 || st.PeakInUse != 4*mb {
		t.Errorf("after a 3 MiB request: %+v, want 4 MiB mapped, none pooled, one unmapped", st)
	}
	p.putBuffer(c)
	p.putBuffer(d)
	// Scratch slices (get/put) come back by address, once however often they are put.
	s := p.get(dtypes.Float64, mb/8*3)
	if st := p.stats(); st.Maps != 3 || st.Pooled != mb {
		t.Errorf("a 3 MiB scratch slice did not take the pooled 3 MiB mapping: %+v", st)
	}
	p.put(dtypes.Float64, s)
	p.put(dtypes.Float64, s)
	if st := p.stats(); st.Pooled != 4*mb || st.InUse != 0 {
		t.Errorf("after putting the scratch slice back (twice): %+v", st)
	}
	// Small and boolean buffers stay on the Go heap.
	for _, sh := range []shapes.Shape{shapes.Make(dtypes.Float32, 10), shapes.Make(dtypes.Bool, 2*mb)} {
		if buf := p.newBuffer(sh); buf.mem != nil {
			t.Errorf("%s was mapped", sh)
		}
	}
}

// TestDroppedMappingReclaimed: a mapped buffer dropped without being released (an execution
// that failed half-way leaves its intermediates so) is unmapped by the garbage collector.
func TestDroppedMappingReclaimed(t *testing.T) {
	withOffHeap(t, 4096)
	p := &bufferPool{}
	defer p.drain()
	buf := p.newBuffer(shapes.Make(dtypes.Float32, 1<<18))
	buf.flat.([]float32)[1<<18-1] = 1 // the whole mapping is writable
	if st := p.stats(); st.Total != 1<<20 {
		t.Fatalf("mapped %d bytes, want 1 MiB", st.Total)
	}
	runtime.KeepAlive(buf)
	buf = nil
	deadline := time.Now().Add(5 * time.Second)
	for p.stats().Total != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dropped mapping not reclaimed: %+v", p.stats())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if st := p.stats(); st.InUse != 0 || st.Unmaps != 0 {
		t.Errorf("after reclaim: %+v", st)
	}
}

// TestDonatedUnreadInputPooled: a donated input the program does not read is pooled by the
// execution, not left to the collector.
func TestDonatedUnreadInputPooled(t *testing.T) {
	b := &Backend{}
	vec := shapes.Make(dtypes.Float32, 4)
	x := mustBuffer(t, b, []float32{1, 2, 3, 4}, 4)
	y := mustBuffer(t, b, []float32{5, 6, 7, 8}, 4)
	storage := &x.(*Buffer).flat.([]float32)[0]
	outs := buildAndRun(t, b, []shapes.Shape{vec, vec}, func(bld backends.Builder, p []backends.Op) []backends.Op {
		return []backends.Op{must(bld.Neg(p[1]))}
	}, []backends.Buffer{x, y}, []bool{true, false})
	if got := readFloats(t, b, outs[0]); got[0] != -5 {
		t.Errorf("-y = %v", got)
	}
	if got := b.pool.getHeap(dtypes.Float32, 4).([]float32); &got[0] != storage {
		t.Error("the donated, unread input's storage was not pooled")
	}
}

// TestConcurrentMappedExecutions: executions running at once share the pool's mappings
// (run with -race, which checks the pool's bookkeeping; it cannot see inside mappings), each
// gets its own, and the pool never maps more than was in use at once.
func TestConcurrentMappedExecutions(t *testing.T) {
	withOffHeap(t, 4096)
	b := &Backend{}
	defer b.Finalize()
	const rows, cols = 250, 200
	const n = rows * cols
	vec := shapes.Make(dtypes.Float32, rows, cols)
	bld := b.Builder(t.Name())
	x := must(bld.Parameter("x", vec, nil))
	// -2·xᵀ², through the transpose, a mapped intermediate.
	xt := must(bld.Transpose(x, 1, 0))
	y := must(bld.Mul(must(bld.Add(xt, xt)), xt))
	exe, err := bld.Compile([]backends.Op{must(bld.Neg(y))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, runs = 4, 10
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			errs <- func() error {
				xs := make([]float32, n)
				for i := range xs {
					xs[i] = float32(g + i%7)
				}
				for range runs {
					in, err := b.BufferFromFlatData(0, xs, vec)
					if err != nil {
						return err
					}
					outs, err := exe.Execute([]backends.Buffer{in}, []bool{true}, 0)
					if err != nil {
						return err
					}
					got := outs[0].(*Buffer).flat.([]float32)
					for i, v := range xs {
						r, c := i/cols, i%cols
						if want := -2 * v * v; got[c*rows+r] != want {
							return fmt.Errorf("goroutine %d: -2x² at (%d,%d) = %v, want %v", g, c, r, got[c*rows+r], want)
						}
					}
					if err := b.BufferFinalize(outs[0]); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := b.pool.stats(); st.InUse != 0 || st.Total > st.PeakInUse || st.Maps == 0 {
		t.Errorf("after the executions: %+v, want nothing in use, no more mapped than the peak in use", st)
	}
}

// TestReleasePooled: the backend returns its pooled mappings on request (and only those: a
// buffer in use stays mapped), and maps afresh afterwards.
func TestReleasePooled(t *testing.T) {
	withOffHeap(t, 4096)
	b := &Backend{}
	defer b.pool.drain()
	const mb = 1 << 20
	kept := b.pool.newBuffer(shapes.Make(dtypes.Float32, mb/4))
	idle := b.pool.newBuffer(shapes.Make(dtypes.Float32, mb/4))
	b.pool.putBuffer(idle)
	if got := b.PooledBytes(); got != mb {
		t.Fatalf("PooledBytes = %d, want %d", got, mb)
	}
	if got := b.ReleasePooled(); got != mb {
		t.Fatalf("ReleasePooled = %d, want %d", got, mb)
	}
	if st := b.pool.stats(); st.Pooled != 0 || st.Total != mb || st.InUse != mb {
		t.Fatalf("after ReleasePooled: %+v, want the buffer in use alone mapped", st)
	}
	again := b.pool.newBuffer(shapes.Make(dtypes.Float32, mb/4))
	if st := b.pool.stats(); st.Maps != 3 {
		t.Errorf("after ReleasePooled a buffer was not mapped afresh: %+v", st)
	}
	b.pool.putBuffer(again)
	b.pool.putBuffer(kept)
}
