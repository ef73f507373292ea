package cpu

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
)

// Per-op timing, for finding where a program's time goes (issue #35: a training step's
// products ran below the forward's rate, and a Go CPU profile cannot say which op an OpenBLAS
// thread is working for). With STX_CPU_OPSTATS set, each execution of a program of at least
// opStatsMinSteps steps prints to stderr its wall time per kind of step (the op, and for a
// product its shape and layout, with the GFLOP/s it achieved), largest first, with the page
// faults and new mappings each kind caused: storage touched for the first time costs a fault
// per 4 KiB page (at a 0.5B model's shape the products writing freshly mapped activations ran
// at 135 GFLOP/s, the others at 210). Off, it costs one predictable branch per step.

const opStatsEnv = "STX_CPU_OPSTATS"

// opStatsMinSteps: smaller programs (the sampler's, the optimizer's pieces) are not reported.
const opStatsMinSteps = 200

var opStatsOn = sync.OnceValue(func() bool { return os.Getenv(opStatsEnv) != "" })

// opStat accumulates the steps of one kind.
type opStat struct {
	key   string
	count int
	wall  time.Duration
	flops float64
	// faults counts the process's minor page faults during these steps (every thread's: the
	// OpenBLAS pool's too): a product writing into storage mapped afresh pays one per page.
	faults int64
	// maps counts the new mappings the pool made during these steps (hostmem.go).
	maps int
}

// opStats collects one execution's timings.
type opStats struct {
	byKey  map[string]*opStat
	start  time.Time
	faults int64 // the process's minor faults when the running step started
	pool   *bufferPool
	maps   int // the pool's mappings made when the running step started
}

// begin marks the start of a step.
func (s *opStats) begin() time.Time {
	if s == nil {
		return time.Time{}
	}
	s.faults = minorFaults()
	s.maps = s.pool.stats().Maps
	return time.Now()
}

func newOpStats(pool *bufferPool) *opStats {
	if !opStatsOn() {
		return nil
	}
	return &opStats{byKey: map[string]*opStat{}, start: time.Now(), pool: pool}
}

// add records that step n took d.
func (s *opStats) add(n *node, d time.Duration) {
	if s == nil {
		return
	}
	key, flops := opStatKey(n)
	st := s.byKey[key]
	if st == nil {
		st = &opStat{key: key}
		s.byKey[key] = st
	}
	st.count++
	st.wall += d
	st.faults += minorFaults() - s.faults
	st.maps += s.pool.stats().Maps - s.maps
	st.flops += flops
}

// opStatKey names a step's kind: products by their plan, other ops by name and output size.
func opStatKey(n *node) (string, float64) {
	acc, isAcc := n.data.(*dotAcc)
	if n.op == backends.OpTypeDotGeneral || isAcc {
		var p *dotPlan
		if isAcc {
			p = acc.plan
		} else {
			p = planOf(n)
		}
		flops := 2 * float64(p.batch) * float64(p.m) * float64(p.n) * float64(p.k)
		var b strings.Builder
		name := "Dot"
		if isAcc {
			name = "Dot+Add"
		}
		fmt.Fprintf(&b, "%s %s b%d m%d k%d n%d", name, n.shape.DType, p.batch, p.m, p.k, p.n)
		if p.transA {
			b.WriteString(" tA")
		}
		if p.transB {
			b.WriteString(" tB")
		}
		if p.lhsPerm != nil {
			fmt.Fprintf(&b, " permA%v", p.lhsPerm)
		}
		if p.rhsPerm != nil {
			fmt.Fprintf(&b, " permB%v", p.rhsPerm)
		}
		if p.lhsView != nil || p.rhsView != nil {
			b.WriteString(" view")
		}
		return b.String(), flops
	}
	name := n.op.String()
	if c, ok := n.data.(*chainPlan); ok {
		ops := make([]string, len(c.ops))
		for i, o := range c.ops {
			ops[i] = o.op.String()
		}
		name = "Chain[" + strings.Join(ops, ",") + "]"
	}
	return fmt.Sprintf("%s %s", name, n.shape), 0
}

// report prints the execution's table if the program is large enough.
func (s *opStats) report(w io.Writer, name string, steps int) {
	if s == nil || steps < opStatsMinSteps {
		return
	}
	total := time.Since(s.start)
	all := make([]*opStat, 0, len(s.byKey))
	var dotWall time.Duration
	var dotFlops float64
	for _, st := range s.byKey {
		all = append(all, st)
		if st.flops > 0 {
			dotWall += st.wall
			dotFlops += st.flops
		}
	}
	slices.SortFunc(all, func(a, b *opStat) int { return cmp.Compare(b.wall, a.wall) })
	fmt.Fprintf(w, "opstats %q: %d steps, %.3f s; products %.3f s at %.1f GFLOP/s, the rest %.3f s\n",
		name, steps, total.Seconds(), dotWall.Seconds(), dotFlops/dotWall.Seconds()/1e9, (total - dotWall).Seconds())
	for i, st := range all {
		if i == 60 {
			break
		}
		gf := ""
		if st.flops > 0 {
			gf = fmt.Sprintf(" %7.1f GFLOP/s", st.flops/st.wall.Seconds()/1e9)
		}
		fmt.Fprintf(w, "  %8.3f s %5.1f%% %5dx %8d faults %4d maps%s  %s\n", st.wall.Seconds(), 100*st.wall.Seconds()/total.Seconds(), st.count, st.faults, st.maps, gf, st.key)
	}
}
