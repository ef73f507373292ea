package tasks

import (
	"math"
	"math/big"
	"math/cmplx"
)

// Evaluation of answer expressions: exactly, as a rational (big.Rat), when
// the expression is one (numbers, + − × ÷, integer powers, roots of exact
// powers, factorials, binomials, |x|, ⌊x⌋, ⌈x⌉, percentages); else as a
// complex number (complex128) with the free variables set to given values.

// Limits of exact evaluation; beyond them the numeric one takes over.
const (
	maxExactBits     = 4096 // numerator or denominator size
	maxExactExponent = 4096
	maxFactorial     = 300
)

// exactValue evaluates x as a rational; false when x is not one (a symbol,
// an irrational number, an undefined operation) or is too large.
func exactValue(x *expr) (*big.Rat, bool) {
	r, ok := exactEval(x, 0)
	if !ok || r.Num().BitLen() > maxExactBits || r.Denom().BitLen() > maxExactBits {
		return nil, false
	}
	return r, true
}

func exactEval(x *expr, depth int) (*big.Rat, bool) {
	if depth > maxParseDepth {
		return nil, false
	}
	depth++
	switch x.kind {
	case eNum:
		return new(big.Rat).Set(x.num), true
	case eAdd:
		s := new(big.Rat)
		for _, a := range x.args {
			v, ok := exactEval(a, depth)
			if !ok {
				return nil, false
			}
			s.Add(s, v)
		}
		return s, true
	case eMul:
		s := big.NewRat(1, 1)
		for _, a := range x.args {
			v, ok := exactEval(a, depth)
			if !ok {
				return nil, false
			}
			s.Mul(s, v)
			if s.Num().BitLen() > maxExactBits || s.Denom().BitLen() > maxExactBits {
				return nil, false
			}
		}
		return s, true
	case eNeg:
		v, ok := exactEval(x.args[0], depth)
		if !ok {
			return nil, false
		}
		return v.Neg(v), true
	case ePct:
		v, ok := exactEval(x.args[0], depth)
		if !ok {
			return nil, false
		}
		return v.Quo(v, big.NewRat(100, 1)), true
	case eDiv:
		a, ok1 := exactEval(x.args[0], depth)
		b, ok2 := exactEval(x.args[1], depth)
		if !ok1 || !ok2 || b.Sign() == 0 {
			return nil, false
		}
		return a.Quo(a, b), true
	case ePow:
		a, ok1 := exactEval(x.args[0], depth)
		b, ok2 := exactEval(x.args[1], depth)
		if !ok1 || !ok2 {
			return nil, false
		}
		return ratPow(a, b)
	case eFunc:
		return exactFunc(x, depth)
	}
	return nil, false
}

// ratPow is a^b for rational b = p/q when the result is rational.
func ratPow(a, b *big.Rat) (*big.Rat, bool) {
	if !b.Num().IsInt64() || !b.Denom().IsInt64() {
		return nil, false
	}
	p, q := b.Num().Int64(), b.Denom().Int64()
	if p < -maxExactExponent || p > maxExactExponent {
		return nil, false
	}
	if q != 1 {
		r, ok := ratRoot(a, q)
		if !ok {
			return nil, false
		}
		a = r
	}
	if a.Sign() == 0 {
		if p <= 0 {
			return nil, false
		}
		return new(big.Rat), true
	}
	neg := p < 0
	if neg {
		p = -p
	}
	bits := max(a.Num().BitLen(), a.Denom().BitLen())
	if int64(bits)*p > maxExactBits {
		return nil, false
	}
	num := new(big.Int).Exp(a.Num(), big.NewInt(p), nil)
	den := new(big.Int).Exp(a.Denom(), big.NewInt(p), nil)
	r := new(big.Rat).SetFrac(num, den)
	if neg {
		r.Inv(r)
	}
	return r, true
}

// ratRoot is the q-th root of a when it is rational (the real root of a
// negative number for odd q).
func ratRoot(a *big.Rat, q int64) (*big.Rat, bool) {
	if q < 1 || q > 64 {
		return nil, false
	}
	neg := a.Sign() < 0
	if neg && q%2 == 0 {
		return nil, false
	}
	n, ok1 := intRoot(new(big.Int).Abs(a.Num()), q)
	d, ok2 := intRoot(a.Denom(), q)
	if !ok1 || !ok2 {
		return nil, false
	}
	r := new(big.Rat).SetFrac(n, d)
	if neg {
		r.Neg(r)
	}
	return r, true
}

// intRoot is the exact q-th root of n ≥ 0, if n is a q-th power.
func intRoot(n *big.Int, q int64) (*big.Int, bool) {
	if n.Sign() == 0 {
		return new(big.Int), true
	}
	if q == 2 {
		r := new(big.Int).Sqrt(n)
		return r, new(big.Int).Mul(r, r).Cmp(n) == 0
	}
	// Newton's method from a float estimate, then check neighbours.
	f, _ := new(big.Float).SetInt(n).Float64()
	if math.IsInf(f, 0) {
		return nil, false
	}
	est := math.Round(math.Pow(f, 1/float64(q)))
	for d := -1.0; d <= 1; d++ {
		c, _ := big.NewFloat(est + d).Int(nil)
		if c.Sign() < 0 {
			continue
		}
		if new(big.Int).Exp(c, big.NewInt(q), nil).Cmp(n) == 0 {
			return c, true
		}
	}
	return nil, false
}

func exactFunc(x *expr, depth int) (*big.Rat, bool) {
	args := make([]*big.Rat, len(x.args))
	for i, a := range x.args {
		v, ok := exactEval(a, depth)
		if !ok {
			return nil, false
		}
		args[i] = v
	}
	switch x.name {
	case "sqrt":
		return ratRoot(args[0], 2)
	case "root":
		if !args[1].IsInt() || !args[1].Num().IsInt64() {
			return nil, false
		}
		return ratRoot(args[0], args[1].Num().Int64())
	case "abs":
		return args[0].Abs(args[0]), true
	case "floor", "ceil":
		q, m := new(big.Int).DivMod(args[0].Num(), args[0].Denom(), new(big.Int))
		if x.name == "ceil" && m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		return new(big.Rat).SetInt(q), true
	case "factorial":
		if !args[0].IsInt() || args[0].Sign() < 0 || args[0].Num().Cmp(big.NewInt(maxFactorial)) > 0 {
			return nil, false
		}
		return new(big.Rat).SetInt(new(big.Int).MulRange(1, args[0].Num().Int64())), true
	case "binom":
		n, k := args[0], args[1]
		if !n.IsInt() || !k.IsInt() || n.Sign() < 0 || k.Sign() < 0 || n.Num().Cmp(big.NewInt(100000)) > 0 {
			return nil, false
		}
		if k.Cmp(n) > 0 {
			return new(big.Rat), true
		}
		return new(big.Rat).SetInt(new(big.Int).Binomial(n.Num().Int64(), k.Num().Int64())), true
	case "log":
		// log_b(b^k) = k for rational results with integer k.
		a, b := args[0], args[1]
		if a.Sign() <= 0 || b.Sign() <= 0 || b.Cmp(big.NewRat(1, 1)) == 0 {
			return nil, false
		}
		for k := int64(-64); k <= 64; k++ {
			if r, ok := ratPow(b, big.NewRat(k, 1)); ok && r.Cmp(a) == 0 {
				return big.NewRat(k, 1), true
			}
		}
	}
	return nil, false
}

// numValue evaluates x at the point env (symbol → value); NaN when x is
// undefined there.
func numValue(x *expr, env map[string]complex128) complex128 {
	return numEval(x, env, 0)
}

var cnan = complex(math.NaN(), math.NaN())

func numEval(x *expr, env map[string]complex128, depth int) complex128 {
	if depth > maxParseDepth {
		return cnan
	}
	depth++
	switch x.kind {
	case eNum:
		f, _ := x.num.Float64()
		return complex(f, 0)
	case eSym:
		if v, ok := env[x.name]; ok {
			return v
		}
		return cnan
	case eConst:
		switch x.name {
		case "pi":
			return complex(math.Pi, 0)
		case "e":
			return complex(math.E, 0)
		case "inf":
			return complex(math.Inf(1), 0)
		}
	case eAdd:
		var s complex128
		for _, a := range x.args {
			s += numEval(a, env, depth)
		}
		return s
	case eMul:
		s := complex(1, 0)
		for _, a := range x.args {
			s *= numEval(a, env, depth)
		}
		return s
	case eNeg:
		return -numEval(x.args[0], env, depth)
	case ePct:
		return numEval(x.args[0], env, depth) / 100
	case eDiv:
		b := numEval(x.args[1], env, depth)
		if b == 0 {
			return cnan
		}
		return numEval(x.args[0], env, depth) / b
	case ePow:
		a, b := numEval(x.args[0], env, depth), numEval(x.args[1], env, depth)
		if imag(a) == 0 && imag(b) == 0 && (real(a) >= 0 || real(b) == math.Trunc(real(b))) {
			return complex(math.Pow(real(a), real(b)), 0)
		}
		if a == 0 {
			return cnan
		}
		return cmplx.Pow(a, b)
	case eFunc:
		return numFunc(x, env, depth)
	}
	return cnan
}

func numFunc(x *expr, env map[string]complex128, depth int) complex128 {
	a := numEval(x.args[0], env, depth)
	switch x.name {
	case "sqrt":
		return cmplx.Sqrt(a)
	case "root":
		// The principal root, as a^(1/n) is (exact evaluation takes the
		// real root of a negative rational: \sqrt[3]{-8} is −2).
		n := numEval(x.args[1], env, depth)
		if a == 0 {
			return 0
		}
		if imag(a) == 0 && imag(n) == 0 && real(a) > 0 {
			return complex(math.Pow(real(a), 1/real(n)), 0)
		}
		return cmplx.Pow(a, 1/n)
	case "abs":
		return complex(cmplx.Abs(a), 0)
	case "floor":
		return complex(math.Floor(real(a)), 0)
	case "ceil":
		return complex(math.Ceil(real(a)), 0)
	case "factorial":
		if imag(a) != 0 {
			return cnan
		}
		return complex(math.Gamma(real(a)+1), 0)
	case "binom":
		k := numEval(x.args[1], env, depth)
		if imag(k) != 0 || real(k) != math.Trunc(real(k)) || real(k) < 0 || real(k) > 100 {
			return cnan
		}
		// n(n−1)…(n−k+1)/k!, a polynomial in n.
		r := complex(1, 0)
		for i := 0; i < int(real(k)); i++ {
			r = r * (a - complex(float64(i), 0)) / complex(float64(i+1), 0)
		}
		return r
	case "log":
		b := numEval(x.args[1], env, depth)
		if a == 0 || b == 0 || b == 1 {
			return cnan
		}
		return cmplx.Log(a) / cmplx.Log(b)
	case "ln":
		if a == 0 {
			return cnan
		}
		return cmplx.Log(a)
	case "exp":
		return cmplx.Exp(a)
	case "sin":
		return cmplx.Sin(a)
	case "cos":
		return cmplx.Cos(a)
	case "tan":
		return cmplx.Tan(a)
	case "sec":
		return 1 / cmplx.Cos(a)
	case "csc":
		return 1 / cmplx.Sin(a)
	case "cot":
		return 1 / cmplx.Tan(a)
	case "asin":
		return cmplx.Asin(a)
	case "acos":
		return cmplx.Acos(a)
	case "atan":
		return cmplx.Atan(a)
	case "sinh":
		return cmplx.Sinh(a)
	case "cosh":
		return cmplx.Cosh(a)
	case "tanh":
		return cmplx.Tanh(a)
	}
	return cnan
}

// freeSymbols adds x's free variables to set.
func freeSymbols(x *expr, set map[string]bool) {
	if x.kind == eSym {
		set[x.name] = true
	}
	for _, a := range x.args {
		freeSymbols(a, set)
	}
}

// hasInexact reports whether x holds a number written with a decimal
// point (a measured or rounded value).
func hasInexact(x *expr) bool {
	if x.kind == eNum && x.inexact {
		return true
	}
	for _, a := range x.args {
		if hasInexact(a) {
			return true
		}
	}
	return false
}
