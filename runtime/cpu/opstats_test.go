package cpu

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// TestOpStatsReport checks the per-op table: products keyed by their plan with the FLOPs
// they did, other ops by name and shape, the largest first, small programs not reported.
func TestOpStatsReport(t *testing.T) {
	lhs, rhs := shapes.Make(dtypes.Float32, 64, 32), shapes.Make(dtypes.Float32, 48, 32)
	plan, out, err := planDotGeneral(lhs, []int{1}, nil, rhs, []int{1}, nil) // x·wᵀ
	if err != nil {
		t.Fatal(err)
	}
	dot := &node{op: backends.OpTypeDotGeneral, shape: out, data: plan}
	add := &node{op: backends.OpTypeAdd, shape: out}
	key, flops := opStatKey(dot)
	if want := "Dot Float32 b1 m64 k32 n48 tB"; key != want || flops != 2*64*32*48 {
		t.Fatalf("opStatKey(dot) = %q, %v; want %q, %v", key, flops, want, 2*64*32*48)
	}
	s := &opStats{byKey: map[string]*opStat{}, start: time.Now().Add(-time.Second), pool: &bufferPool{}}
	s.begin()
	s.add(dot, 100*time.Millisecond)
	s.begin()
	s.add(dot, 100*time.Millisecond)
	s.begin()
	s.add(add, 300*time.Millisecond)
	var w bytes.Buffer
	s.report(&w, "p", opStatsMinSteps-1)
	if w.Len() != 0 {
		t.Fatalf("a program of %d steps was reported:\n%s", opStatsMinSteps-1, w.String())
	}
	s.report(&w, "p", opStatsMinSteps)
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("report has %d lines, want a header and 2 rows:\n%s", len(lines), w.String())
	}
	// 2 products of 196,608 FLOPs in 0.2 s: 0.002 GFLOP/s.
	if !strings.Contains(lines[0], "products 0.200 s at 0.0 GFLOP/s") {
		t.Errorf("header %q does not account for the products", lines[0])
	}
	if !strings.Contains(lines[1], "1x") || !strings.HasSuffix(lines[1], "Add (Float32)[64 48]") {
		t.Errorf("first row %q is not the Add, the largest", lines[1])
	}
	if !strings.Contains(lines[2], "2x") || !strings.Contains(lines[2], "GFLOP/s") || !strings.HasSuffix(lines[2], key) {
		t.Errorf("second row %q is not the two products", lines[2])
	}
}
