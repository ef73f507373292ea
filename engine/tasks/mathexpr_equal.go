package tasks

import (
	"math"
	"math/big"
	"math/cmplx"
	"math/rand"
	"sort"
	"strings"
)

// Equivalence of parsed answers, after Math-Verify's verify:
//
//   - scalars without free variables: exactly, as rationals (big.Rat),
//     when both are rational (3/4 = 0.75 = \frac{6}{8}, 2^{10} = 1024,
//     1.5\times10^{3} = 1500, \sqrt{16} = 4); otherwise by value in
//     float64 (complex128), equal within a relative 1e-10 (\sqrt{12} =
//     2\sqrt{3}, \frac{1}{\sqrt2} = \frac{\sqrt2}{2}, \log_2 8 = 3). When
//     either side is a number written with a decimal point (0.333, −2.5,
//     12.5%) the two are equal within the reward's absolute tolerance
//     instead (1/3 and 0.333333 at the default 1e-6, π and 3.14 not); exact
//     forms compare exactly, so that 10^{-7} ≠ 0 and 6.67\times10^{-10} ≠
//     6.67\times10^{-11} whatever the tolerance;
//   - scalars with free variables: by value at 8 seeded pseudo-random points
//     (each variable in ±[0.3, 3], complex arithmetic so that √ and log of
//     negatives stay defined), equal within a relative 1e-9 at every point
//     where both are defined, at least 3 of them; deterministic. So
//     x^2+2x+1 = (x+1)^2 and 3+2x = 2x+3, but 2x+3 ≠ 2y+3;
//   - a percentage equals its value or its hundredth (25% = 25 = 0.25);
//   - relations: an assignment x = 3 equals 3 (and 3 equals x = 3; an
//     equation answer is read as its right side when the reference is not
//     an equation); two relations are equal when they are the same relation
//     of equal sides, mirrored (x < 3, 3 > x), or proportional
//     (y = 2x+1, 2x − y + 1 = 0); a reference inequality in one variable
//     equals the interval it describes (x < 3 and (−∞, 3)), not the other
//     way round;
//   - sets (\{…\} and bare lists "1, 2") ignore order, tuples do not; (a, b)
//     is an open interval or a pair; intervals match with the same ends
//     open; unions match part by part in any order; matrices element by
//     element; a scalar is a one-element set.
//
// The direction matters as in Math-Verify: gold is the reference.

// mathValuesEqual reports whether pred is the reference gold.
func mathValuesEqual(gold, pred *mval, tol float64) bool {
	return valuesEqual(gold, pred, tol, 0)
}

func valuesEqual(gold, pred *mval, tol float64, depth int) bool {
	if depth > 16 {
		return false
	}
	depth++
	goldAssign, predAssign := isAssignment(gold), isAssignment(pred)
	goldEq, predEq := isEquation(gold), isEquation(pred)
	if goldAssign {
		gold = truncateChain(gold)
	}
	if predAssign {
		pred = truncateChain(pred)
	}
	switch {
	case predEq && !goldEq:
		pred = pred.elems[len(pred.elems)-1]
	case goldAssign && !predEq:
		gold = gold.elems[len(gold.elems)-1]
	}
	if gold.kind == vRel && isSetKind(pred.kind) {
		if s, ok := relationAsSet(gold); ok {
			gold = s
		}
	}
	switch {
	case gold.kind == vRel && pred.kind == vRel:
		return relationsEqual(gold, pred, tol, depth)
	case gold.kind == vRel || pred.kind == vRel:
		return false
	case isSetKind(gold.kind) || isSetKind(pred.kind):
		return setsEqual(gold, pred, tol, depth)
	case gold.kind == vMatrix && pred.kind == vMatrix:
		if gold.rows != pred.rows || gold.cols != pred.cols {
			return false
		}
		for i := range gold.elems {
			if !scalarsEqual(gold.elems[i].x, pred.elems[i].x, tol) {
				return false
			}
		}
		return true
	case gold.kind == vScalar && pred.kind == vScalar:
		return scalarsEqual(gold.x, pred.x, tol)
	}
	return false
}

func isSetKind(k valKind) bool {
	switch k {
	case vList, vSet, vTuple, vPair, vInterval, vUnion:
		return true
	}
	return false
}

// isEquation: a relation of equalities (= or ∈) only.
func isEquation(v *mval) bool {
	if v.kind != vRel {
		return false
	}
	for _, op := range v.ops {
		if op != "=" && op != "in" {
			return false
		}
	}
	return true
}

// isAssignment: an equation whose left side is symbols (x = 3, xy = 2).
func isAssignment(v *mval) bool {
	return isEquation(v) && v.elems[0].kind == vScalar && onlySymbols(v.elems[0].x)
}

// truncateChain reads x = a = b as x = b.
func truncateChain(v *mval) *mval {
	if len(v.ops) == 1 {
		return v
	}
	return &mval{kind: vRel, elems: []*mval{v.elems[0], v.elems[len(v.elems)-1]}, ops: []string{v.ops[len(v.ops)-1]}}
}

var flipped = map[string]string{"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}

func relationsEqual(g, p *mval, tol float64, depth int) bool {
	if len(g.ops) != len(p.ops) {
		return false
	}
	if len(g.ops) > 1 {
		for i := range g.ops {
			gi := &mval{kind: vRel, elems: g.elems[i : i+2], ops: g.ops[i : i+1]}
			pi := &mval{kind: vRel, elems: p.elems[i : i+2], ops: p.ops[i : i+1]}
			if !relationsEqual(gi, pi, tol, depth) {
				return false
			}
		}
		return true
	}
	gop, pop := g.ops[0], p.ops[0]
	gl, gr, pl, pr := g.elems[0], g.elems[1], p.elems[0], p.elems[1]
	if gl.kind != vScalar || gr.kind != vScalar || pl.kind != vScalar || pr.kind != vScalar {
		// x ∈ S: the same relation of equal sides.
		return gop == pop && valuesEqual(gl, pl, tol, depth) && valuesEqual(gr, pr, tol, depth)
	}
	gd := addExpr(gl.x, negExpr(gr.x))
	pd := addExpr(pl.x, negExpr(pr.x))
	if gop == pop && scalarsEqual(gd, pd, tol) {
		return true
	}
	if flipped[gop] == pop && scalarsEqual(gd, negExpr(pd), tol) {
		return true
	}
	// The same solutions: the differences are proportional, by a
	// positive factor for an inequality kept, a negative one for a flipped
	// one, any for an equation.
	c, ok := proportional(gd, pd)
	if !ok {
		return false
	}
	switch {
	case gop == "=" && pop == "=", gop == "!=" && pop == "!=":
		return true
	case gop == pop:
		return c > 0
	case flipped[gop] == pop:
		return c < 0
	}
	return false
}

// proportional returns c when a = c·b at every sample point (c real,
// non-zero) and both depend on the variables.
func proportional(a, b *expr) (float64, bool) {
	syms := map[string]bool{}
	freeSymbols(a, syms)
	freeSymbols(b, syms)
	if len(syms) == 0 {
		return 0, false
	}
	var c complex128
	n := 0
	for _, env := range samplePoints(syms) {
		av, bv := numValue(a, env), numValue(b, env)
		if !cfinite(av) || !cfinite(bv) || cmplx.Abs(bv) < 1e-12 {
			continue
		}
		r := av / bv
		if n == 0 {
			c = r
		} else if cmplx.Abs(r-c) > 1e-9*math.Max(1, cmplx.Abs(c)) {
			return 0, false
		}
		n++
	}
	if n < 3 || math.Abs(imag(c)) > 1e-9 || math.Abs(real(c)) < 1e-12 {
		return 0, false
	}
	return real(c), true
}

// relationAsSet reads a relation in one variable as the set it describes:
// x < 3 is (−∞, 3), 2 ≤ x < 5 is [2, 5), x = 3 is {3}.
func relationAsSet(r *mval) (*mval, bool) {
	for _, e := range r.elems {
		if e.kind != vScalar {
			return nil, false
		}
	}
	negInf := scalarVal(negExpr(&expr{kind: eConst, name: "inf"}))
	posInf := scalarVal(&expr{kind: eConst, name: "inf"})
	isVar := func(v *mval) bool { return v.x.kind == eSym }
	isConst := func(v *mval) bool {
		s := map[string]bool{}
		freeSymbols(v.x, s)
		return len(s) == 0
	}
	switch len(r.ops) {
	case 1:
		l, rt, op := r.elems[0], r.elems[1], r.ops[0]
		if !isVar(l) {
			if !isVar(rt) || !isConst(l) {
				return nil, false
			}
			l, rt, op = rt, l, flipped[op]
		} else if !isConst(rt) {
			return nil, false
		}
		switch op {
		case "<":
			return &mval{kind: vInterval, elems: []*mval{negInf, rt}, loOpen: true, hiOpen: true}, true
		case "<=":
			return &mval{kind: vInterval, elems: []*mval{negInf, rt}, loOpen: true}, true
		case ">":
			return &mval{kind: vInterval, elems: []*mval{rt, posInf}, loOpen: true, hiOpen: true}, true
		case ">=":
			return &mval{kind: vInterval, elems: []*mval{rt, posInf}, hiOpen: true}, true
		case "=":
			return &mval{kind: vSet, elems: []*mval{rt}}, true
		}
	case 2:
		a, x, b := r.elems[0], r.elems[1], r.elems[2]
		if !isVar(x) || !isConst(a) || !isConst(b) {
			return nil, false
		}
		o1, o2 := r.ops[0], r.ops[1]
		if (o1 == ">" || o1 == ">=") && (o2 == ">" || o2 == ">=") {
			a, b, o1, o2 = b, a, flipped[o2], flipped[o1]
		}
		if (o1 == "<" || o1 == "<=") && (o2 == "<" || o2 == "<=") {
			return &mval{kind: vInterval, elems: []*mval{a, b}, loOpen: o1 == "<", hiOpen: o2 == "<"}, true
		}
	}
	return nil, false
}

// setsEqual compares answers of which one at least is a set, tuple or
// interval, after Math-Verify's sympy_compare_sets.
func setsEqual(gold, pred *mval, tol float64, depth int) bool {
	g, p := asSetLike(gold), asSetLike(pred)
	gi, gIsInterval := intervalView(g, p)
	pi, pIsInterval := intervalView(p, g)
	switch {
	case g.kind == vUnion || p.kind == vUnion:
		return unionsEqual(g, p, tol, depth)
	case gIsInterval && pIsInterval:
		return gi.loOpen == pi.loOpen && gi.hiOpen == pi.hiOpen &&
			valuesEqual(gi.elems[0], pi.elems[0], tol, depth) && valuesEqual(gi.elems[1], pi.elems[1], tol, depth)
	case gIsInterval || pIsInterval:
		return false
	}
	return finiteEqual(g, p, tol, depth)
}

// asSetLike makes a scalar (or anything else not a set) a one-element set.
func asSetLike(v *mval) *mval {
	if isSetKind(v.kind) {
		return v
	}
	return &mval{kind: vSet, elems: []*mval{v}}
}

// intervalView reads v as an interval against other: an interval is one;
// a pair (a, b) is the open interval when other is an interval or a union.
func intervalView(v, other *mval) (*mval, bool) {
	switch v.kind {
	case vInterval:
		return v, true
	case vPair:
		if other.kind == vInterval || other.kind == vUnion {
			return &mval{kind: vInterval, elems: v.elems, loOpen: true, hiOpen: true}, true
		}
	}
	return nil, false
}

// finiteEqual compares finite sets and tuples: a set reference matches in
// any order; a tuple reference matches in the order written.
func finiteEqual(g, p *mval, tol float64, depth int) bool {
	ge, pe := dedupSet(g), dedupSet(p)
	if len(ge) != len(pe) {
		return false
	}
	if g.kind == vList || g.kind == vSet {
		used := make([]bool, len(pe))
	next:
		for _, a := range ge {
			for j, b := range pe {
				if !used[j] && valuesEqual(a, b, tol, depth) {
					used[j] = true
					continue next
				}
			}
			return false
		}
		return true
	}
	for i := range ge {
		if !valuesEqual(ge[i], pe[i], tol, depth) {
			return false
		}
	}
	return true
}

// dedupSet returns a set's elements without repeats (written the same);
// a tuple's as they are.
func dedupSet(v *mval) []*mval {
	if v.kind != vList && v.kind != vSet {
		return v.elems
	}
	seen := map[string]bool{}
	var out []*mval
	for _, e := range v.elems {
		k := valString(e)
		if !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}

// unionsEqual matches the parts of two unions in any order.
func unionsEqual(g, p *mval, tol float64, depth int) bool {
	parts := func(v *mval) []*mval {
		if v.kind == vUnion {
			return v.elems
		}
		return []*mval{v}
	}
	gp, pp := parts(g), parts(p)
	if len(gp) != len(pp) {
		return false
	}
	used := make([]bool, len(pp))
next:
	for _, a := range gp {
		for j, b := range pp {
			ai, aok := intervalView(a, &mval{kind: vInterval})
			bi, bok := intervalView(b, &mval{kind: vInterval})
			var eq bool
			if aok && bok {
				eq = !used[j] && setsEqual(ai, bi, tol, depth)
			} else {
				eq = !used[j] && valuesEqual(a, b, tol, depth)
			}
			if eq {
				used[j] = true
				continue next
			}
		}
		return false
	}
	return true
}

// Tolerances of the comparison of values computed in floating point.
const (
	relTolConst  = 1e-10 // exact forms without variables
	relTolPoints = 1e-9  // expressions with variables, at each point
)

// scalarsEqual compares two scalar expressions (gold first).
func scalarsEqual(g, p *expr, tol float64) bool {
	if g.kind == ePct || p.kind == ePct {
		if g.kind == ePct && p.kind == ePct {
			return scalarsEqual(g.args[0], p.args[0], tol)
		}
		pct, other := g, p
		if p.kind == ePct {
			pct, other = p, g
		}
		// 25% is 0.25, and 25 where the other answer is the bare number.
		return scalarsEqual(other, &expr{kind: eDiv, args: []*expr{pct.args[0], intExpr(100)}}, tol) ||
			scalarsEqual(other, pct.args[0], tol)
	}
	if exprString(g) == exprString(p) {
		return true
	}
	inexact := isDecimal(g) || isDecimal(p)
	gr, ok1 := exactValue(g)
	pr, ok2 := exactValue(p)
	if ok1 && ok2 {
		if gr.Cmp(pr) == 0 {
			return true
		}
		if !inexact {
			return false
		}
		d, _ := new(big.Rat).Sub(gr, pr).Float64()
		return math.Abs(d) <= tol
	}
	syms := map[string]bool{}
	freeSymbols(g, syms)
	freeSymbols(p, syms)
	if len(syms) == 0 {
		gv, pv := numValue(g, nil), numValue(p, nil)
		if cmplx.IsNaN(gv) || cmplx.IsNaN(pv) {
			return false
		}
		if cmplx.IsInf(gv) || cmplx.IsInf(pv) {
			return imag(gv) == 0 && imag(pv) == 0 && real(gv) == real(pv)
		}
		d := cmplx.Abs(gv - pv)
		if inexact {
			return d <= tol+1e-12*cmplx.Abs(gv)
		}
		return d <= relTolConst*math.Max(1, math.Max(cmplx.Abs(gv), cmplx.Abs(pv)))
	}
	n := 0
	for _, env := range samplePoints(syms) {
		gv, pv := numValue(g, env), numValue(p, env)
		if !cfinite(gv) || !cfinite(pv) {
			continue
		}
		if cmplx.Abs(gv-pv) > relTolPoints*math.Max(1, math.Max(cmplx.Abs(gv), cmplx.Abs(pv))) {
			return false
		}
		n++
	}
	return n >= 3
}

// isDecimal reports whether x is a number written with a decimal point
// (a measured or rounded value: 0.333, −2.5, 12.5%), which compares within
// the tolerance; an expression holding one (1.5\times10^{3}) compares
// exactly, as Math-Verify does.
func isDecimal(x *expr) bool {
	switch x.kind {
	case eNum:
		return x.inexact
	case eNeg, ePct:
		return isDecimal(x.args[0])
	}
	return false
}

func cfinite(v complex128) bool { return !cmplx.IsNaN(v) && !cmplx.IsInf(v) }

// samplePointCount is the number of points expressions with variables are
// compared at.
const samplePointCount = 8

// samplePoints returns the seeded pseudo-random points: every variable in
// ±[0.3, 3] (both signs), the same values for the same variable names on
// every call.
func samplePoints(syms map[string]bool) []map[string]complex128 {
	names := make([]string, 0, len(syms))
	for s := range syms {
		names = append(names, s)
	}
	sort.Strings(names)
	rng := rand.New(rand.NewSource(20240601))
	pts := make([]map[string]complex128, samplePointCount)
	for k := range pts {
		pts[k] = make(map[string]complex128, len(names))
		for _, s := range names {
			v := 0.3 + 2.7*rng.Float64()
			// Every variable is positive at the first point, negative at
			// the second, of random sign after: |x| ≠ x.
			if neg := rng.Intn(2) == 0; k == 1 || k > 1 && neg {
				v = -v
			}
			pts[k][s] = complex(v, 0)
		}
	}
	return pts
}

// exprString prints an expression canonically enough to find identical
// ones (structure, not value).
func exprString(x *expr) string {
	var b strings.Builder
	writeExpr(&b, x, 0)
	return b.String()
}

func writeExpr(b *strings.Builder, x *expr, depth int) {
	if depth > maxParseDepth {
		return
	}
	switch x.kind {
	case eNum:
		b.WriteString(x.num.RatString())
		return
	case eSym, eConst:
		b.WriteString(x.name)
		return
	}
	b.WriteString([]string{"num", "sym", "const", "add", "mul", "neg", "div", "pow", "f:" + x.name, "pct"}[x.kind])
	b.WriteByte('(')
	for i, a := range x.args {
		if i > 0 {
			b.WriteByte(',')
		}
		writeExpr(b, a, depth+1)
	}
	b.WriteByte(')')
}

// valString prints a value for deduplication.
func valString(v *mval) string {
	if v.kind == vScalar {
		return exprString(v.x)
	}
	var b strings.Builder
	b.WriteByte(byte('A' + v.kind))
	if v.loOpen {
		b.WriteByte('(')
	}
	if v.hiOpen {
		b.WriteByte(')')
	}
	b.WriteString(strings.Join(v.ops, ","))
	b.WriteByte('[')
	for i, e := range v.elems {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(valString(e))
	}
	b.WriteByte(']')
	return b.String()
}
