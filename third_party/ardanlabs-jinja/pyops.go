// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python's semantics for values: str() and repr(), ==, <, in, the
// arithmetic operators, printf-style % formatting and str.format.

// kwPair is one keyword argument; kwargs keeps their order.
type kwPair struct {
	name  string
	value Value
}

type kwargs []kwPair

func (k kwargs) with(name string, v Value) kwargs {
	for i := range k {
		if k[i].name == name {
			out := append(kwargs(nil), k...)
			out[i].value = v
			return out
		}
	}
	return append(k[:len(k):len(k)], kwPair{name, v})
}

func (k kwargs) get(name string) (Value, bool) {
	for _, p := range k {
		if p.name == name {
			return p.value, true
		}
	}
	return Value{}, false
}

func (k *kwargs) pop(name string) (Value, bool) {
	for i, p := range *k {
		if p.name == name {
			out := make(kwargs, 0, len(*k)-1)
			out = append(out, (*k)[:i]...)
			*k = append(out, (*k)[i+1:]...)
			return p.value, true
		}
	}
	return Value{}, false
}

func (k kwargs) toMap() map[string]Value {
	if len(k) == 0 {
		return nil
	}
	m := make(map[string]Value, len(k))
	for _, p := range k {
		m[p.name] = p.value
	}
	return m
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// toInt is the integer value of an int or a bool.
func toInt(v Value) int64 {
	switch v.kind {
	case KindInt:
		return v.v.(int64)
	case KindBool:
		if v.v.(bool) {
			return 1
		}
	case KindFloat:
		return int64(v.v.(float64))
	}
	return 0
}

func isIntLike(v Value) bool { return v.kind == KindInt || v.kind == KindBool }

func isNumeric(v Value) bool {
	return v.kind == KindInt || v.kind == KindBool || v.kind == KindFloat
}

func toFloat(v Value) float64 {
	if v.kind == KindFloat {
		return v.v.(float64)
	}
	return float64(toInt(v))
}

// formatFloat is Python's repr of a float.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expS, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expS)
	if decpt := exp + 1; decpt > -4 && decpt <= 16 {
		s = strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	e := strconv.Itoa(exp)
	if len(e) < 2 {
		e = "0" + e
	}
	return mant + "e" + sign + e
}

// pyReprString is Python's repr of a str.
func pyReprString(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < ' ' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f:
			b.WriteRune(r)
		case !unicode.IsPrint(r):
			switch {
			case r <= 0xff:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// reprValue is repr(v), with default limits.
func reprValue(v Value, depth int) (string, error) {
	var b strings.Builder
	err := newEvaluator(DefaultLimits).repr(&b, v, depth)
	return b.String(), err
}

// str is Python's str(v): an undefined value is "", None is "None".
func (e *evaluator) str(v Value) (string, error) {
	switch v.kind {
	case KindUndefined:
		return "", nil
	case KindString:
		return v.v.(string), nil
	case KindInt:
		return itoa(v.v.(int64)), nil
	}
	var b strings.Builder
	err := e.repr(&b, v, 0)
	return b.String(), err
}

// repr writes Python's repr of v.
func (e *evaluator) repr(b *strings.Builder, v Value, depth int) error {
	if depth > maxNesting {
		return errorf("RecursionError", "maximum recursion depth exceeded while getting the repr of an object")
	}
	if b.Len() > e.lim.MaxStringBytes {
		return limitError("the rendering builds a string of more than %d bytes (Limits.MaxStringBytes)", e.lim.MaxStringBytes)
	}
	switch v.kind {
	case KindUndefined:
		b.WriteString("Undefined")
	case KindNone:
		b.WriteString("None")
	case KindBool:
		if v.v.(bool) {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case KindInt:
		b.WriteString(itoa(v.v.(int64)))
	case KindFloat:
		b.WriteString(formatFloat(v.v.(float64)))
	case KindString:
		if v.safe {
			b.WriteString("Markup(" + pyReprString(v.v.(string)) + ")")
		} else {
			b.WriteString(pyReprString(v.v.(string)))
		}
	case KindList:
		l := v.v.(*List)
		switch {
		case l.rng != "":
			b.WriteString(l.rng)
			return nil
		case l.gen:
			b.WriteString("<generator object>")
			return nil
		case l.view != "":
			b.WriteString(l.view + "(")
		}
		open, close := "[", "]"
		if l.Tuple {
			open, close = "(", ")"
		}
		b.WriteString(open)
		for i, item := range l.Items {
			if err := e.step(1); err != nil {
				return err
			}
			if i > 0 {
				b.WriteString(", ")
			}
			if err := e.repr(b, item, depth+1); err != nil {
				return err
			}
		}
		if l.Tuple && len(l.Items) == 1 {
			b.WriteString(",")
		}
		b.WriteString(close)
		if l.view != "" {
			b.WriteString(")")
		}
	case KindDict:
		d := v.v.(*Dict)
		b.WriteByte('{')
		for i, k := range d.Keys {
			if err := e.step(1); err != nil {
				return err
			}
			if i > 0 {
				b.WriteString(", ")
			}
			if err := e.repr(b, d.keyValue(k), depth+1); err != nil {
				return err
			}
			b.WriteString(": ")
			if err := e.repr(b, d.Data[k], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case KindCallable:
		c := v.v.(Callable)
		if c.repr != "" {
			b.WriteString(c.repr)
		} else {
			b.WriteString("<function " + c.Name + ">")
		}
	case KindObject:
		o := v.v.(*Object)
		switch {
		case o.repr != nil:
			b.WriteString(o.repr())
		case o.Type == "Namespace":
			b.WriteString("<Namespace ")
			if err := e.repr(b, Value{kind: KindDict, v: o.Attrs}, depth+1); err != nil {
				return err
			}
			b.WriteString(">")
		default:
			b.WriteString("<" + o.Type + " object>")
		}
	}
	return nil
}

// equal is Python's ==.
func (e *evaluator) equal(a, b Value, depth int) (bool, error) {
	if depth > maxNesting {
		return false, errorf("RecursionError", "maximum recursion depth exceeded in comparison")
	}
	if isNumeric(a) && isNumeric(b) {
		if a.kind == KindFloat || b.kind == KindFloat {
			return toFloat(a) == toFloat(b), nil
		}
		return toInt(a) == toInt(b), nil
	}
	if a.kind != b.kind {
		return false, nil
	}
	switch a.kind {
	case KindUndefined, KindNone:
		return true, nil
	case KindString:
		return a.v.(string) == b.v.(string), nil
	case KindList:
		la, lb := a.v.(*List), b.v.(*List)
		if la == lb {
			return true, nil
		}
		if la.gen || lb.gen || la.Tuple != lb.Tuple || la.view != lb.view || (la.rng == "") != (lb.rng == "") || len(la.Items) != len(lb.Items) {
			return false, nil
		}
		for i := range la.Items {
			if err := e.step(1); err != nil {
				return false, err
			}
			eq, err := e.equal(la.Items[i], lb.Items[i], depth+1)
			if err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case KindDict:
		da, db := a.v.(*Dict), b.v.(*Dict)
		if da == db {
			return true, nil
		}
		if len(da.Keys) != len(db.Keys) {
			return false, nil
		}
		for _, k := range da.Keys {
			if err := e.step(1); err != nil {
				return false, err
			}
			bv, ok := db.Data[k]
			if !ok {
				return false, nil
			}
			eq, err := e.equal(da.Data[k], bv, depth+1)
			if err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case KindObject:
		return a.v.(*Object) == b.v.(*Object), nil
	}
	return false, nil
}

func pyEqual(a, b Value, depth int) (bool, error) {
	return newEvaluator(DefaultLimits).equal(a, b, depth)
}

// less is Python's <; ok is false where Python raises a TypeError.
func (e *evaluator) less(a, b Value, depth int) (lt, ok bool, err error) {
	if depth > maxNesting {
		return false, false, errorf("RecursionError", "maximum recursion depth exceeded in comparison")
	}
	if isNumeric(a) && isNumeric(b) {
		if a.kind == KindFloat || b.kind == KindFloat {
			return toFloat(a) < toFloat(b), true, nil
		}
		return toInt(a) < toInt(b), true, nil
	}
	if a.kind == KindString && b.kind == KindString {
		return a.v.(string) < b.v.(string), true, nil
	}
	if a.kind == KindList && b.kind == KindList {
		la, lb := a.v.(*List), b.v.(*List)
		if la.Tuple != lb.Tuple || la.gen || lb.gen || la.view != "" || lb.view != "" || la.rng != "" || lb.rng != "" {
			return false, false, nil
		}
		for i := 0; i < len(la.Items) && i < len(lb.Items); i++ {
			if err := e.step(1); err != nil {
				return false, false, err
			}
			eq, err := e.equal(la.Items[i], lb.Items[i], depth+1)
			if err != nil {
				return false, false, err
			}
			if !eq {
				return e.less(la.Items[i], lb.Items[i], depth+1)
			}
		}
		return len(la.Items) < len(lb.Items), true, nil
	}
	return false, false, nil
}

// compareOp evaluates one comparison of a chain.
func (e *evaluator) compareOp(op string, a, b Value) (bool, error) {
	switch op {
	case "==":
		return e.equal(a, b, 0)
	case "!=":
		eq, err := e.equal(a, b, 0)
		return !eq, err
	case "in":
		return e.contains(b, a)
	case "notin":
		in, err := e.contains(b, a)
		return !in, err
	}
	if a.kind == KindUndefined {
		return false, undefinedError(a)
	}
	if b.kind == KindUndefined {
		return false, undefinedError(b)
	}
	var lt, ok bool
	var err error
	switch op {
	case "<":
		lt, ok, err = e.less(a, b, 0)
	case ">":
		lt, ok, err = e.less(b, a, 0)
	case "<=", ">=":
		x, y := a, b
		if op == ">=" {
			x, y = b, a
		}
		if lt, ok, err = e.less(x, y, 0); ok && err == nil && !lt {
			lt, err = e.equal(x, y, 0)
		}
	}
	if err != nil {
		return false, err
	}
	if !ok {
		return false, errorf("TypeError", "'%s' not supported between instances of %s and %s", op, pyReprString(typeName(a)), pyReprString(typeName(b)))
	}
	return lt, nil
}

// contains is Python's item in container.
func (e *evaluator) contains(container, item Value) (bool, error) {
	switch container.kind {
	case KindUndefined:
		return false, nil
	case KindString:
		if item.kind != KindString {
			return false, errorf("TypeError", "'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(container.v.(string), item.v.(string)), nil
	case KindList:
		l := container.v.(*List)
		for _, x := range l.Items {
			if err := e.step(1); err != nil {
				return false, err
			}
			eq, err := e.equal(x, item, 0)
			if err != nil {
				return false, err
			}
			if eq {
				return true, nil
			}
		}
		return false, nil
	case KindDict:
		ks, err := hashKey(item)
		if err != nil {
			return false, err
		}
		return container.v.(*Dict).Has(ks), nil
	}
	return false, errorf("TypeError", "argument of type %s is not iterable", pyReprString(typeName(container)))
}

func unaryOp(op string, v Value) (Value, error) {
	switch v.kind {
	case KindUndefined:
		return Value{}, undefinedError(v)
	case KindInt, KindBool:
		n := toInt(v)
		if op == "-" {
			if n == math.MinInt64 {
				return Value{}, errorf("OverflowError", "integer overflow (integers here have 64 bits)")
			}
			n = -n
		}
		return NewInt(n), nil
	case KindFloat:
		if op == "-" {
			return NewFloat(-v.v.(float64)), nil
		}
		return v, nil
	}
	return Value{}, errorf("TypeError", "bad operand type for unary %s: %s", op, pyReprString(typeName(v)))
}

func overflow() error {
	return errorf("OverflowError", "integer overflow (integers here have 64 bits)")
}

func opTypeError(op string, a, b Value) error {
	return errorf("TypeError", "unsupported operand type(s) for %s: %s and %s", op, pyReprString(typeName(a)), pyReprString(typeName(b)))
}

// binOp is Python's a op b for + - * / // % **.
func (e *evaluator) binOp(op string, a, b Value) (Value, error) {
	if a.kind == KindUndefined {
		return Value{}, undefinedError(a)
	}
	if b.kind == KindUndefined {
		return Value{}, undefinedError(b)
	}
	if isNumeric(a) && isNumeric(b) {
		return numOp(op, a, b)
	}
	switch op {
	case "+":
		switch {
		case a.kind == KindString && b.kind == KindString:
			as, bs := a.v.(string), b.v.(string)
			safe := a.safe || b.safe
			if a.safe && !b.safe {
				bs = escapeString(bs)
			} else if b.safe && !a.safe {
				as = escapeString(as)
			}
			if err := e.grow(len(as) + len(bs)); err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: safe, v: as + bs}, nil
		case a.kind == KindList && b.kind == KindList:
			la, lb := a.v.(*List), b.v.(*List)
			if la.Tuple == lb.Tuple && !la.gen && !lb.gen && la.view == "" && lb.view == "" && la.rng == "" && lb.rng == "" {
				if err := e.items(len(la.Items) + len(lb.Items)); err != nil {
					return Value{}, err
				}
				items := make([]Value, 0, len(la.Items)+len(lb.Items))
				items = append(items, la.Items...)
				items = append(items, lb.Items...)
				return Value{kind: KindList, v: &List{Items: items, Tuple: la.Tuple}}, nil
			}
		}
		if a.kind == KindString || (a.kind == KindList && !a.v.(*List).gen && a.v.(*List).view == "" && a.v.(*List).rng == "") {
			return Value{}, errorf("TypeError", "can only concatenate %s (not \"%s\") to %s", typeName(a), typeName(b), typeName(a))
		}
		return Value{}, opTypeError("+", a, b)
	case "*":
		seq, n := a, b
		if isIntLike(a) {
			seq, n = b, a
		}
		if !isIntLike(n) {
			if seq.kind == KindString || seq.kind == KindList {
				return Value{}, errorf("TypeError", "can't multiply sequence by non-int of type %s", pyReprString(typeName(n)))
			}
			return Value{}, opTypeError("*", a, b)
		}
		count := toInt(n)
		if count < 0 {
			count = 0
		}
		switch seq.kind {
		case KindString:
			s := seq.v.(string)
			if len(s) > 0 && count > int64(e.lim.MaxStringBytes)/int64(len(s)) {
				return Value{}, e.grow(e.lim.MaxStringBytes + 1)
			}
			if err := e.grow(len(s) * int(count)); err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: seq.safe, v: strings.Repeat(s, int(count))}, nil
		case KindList:
			l := seq.v.(*List)
			if l.gen || l.view != "" {
				break
			}
			if len(l.Items) > 0 && count > int64(e.lim.MaxItems)/int64(len(l.Items)) {
				return Value{}, e.items(e.lim.MaxItems + 1)
			}
			if err := e.items(len(l.Items) * int(count)); err != nil {
				return Value{}, err
			}
			items := make([]Value, 0, len(l.Items)*int(count))
			for range count {
				items = append(items, l.Items...)
			}
			return Value{kind: KindList, v: &List{Items: items, Tuple: l.Tuple}}, nil
		}
		return Value{}, opTypeError("*", a, b)
	case "%":
		if a.kind == KindString {
			s, err := e.printf(a.v.(string), b, a.safe)
			if err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: a.safe, v: s}, nil
		}
	}
	return Value{}, opTypeError(op, a, b)
}

func numOp(op string, a, b Value) (Value, error) {
	if a.kind != KindFloat && b.kind != KindFloat {
		x, y := toInt(a), toInt(b)
		switch op {
		case "+":
			r := x + y
			if (x >= 0) == (y >= 0) && (r >= 0) != (x >= 0) {
				return Value{}, overflow()
			}
			return NewInt(r), nil
		case "-":
			r := x - y
			if (x >= 0) != (y >= 0) && (r >= 0) != (x >= 0) {
				return Value{}, overflow()
			}
			return NewInt(r), nil
		case "*":
			if x != 0 && y != 0 {
				r := x * y
				if r/y != x || (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) {
					return Value{}, overflow()
				}
				return NewInt(r), nil
			}
			return NewInt(0), nil
		case "/":
			if y == 0 {
				return Value{}, errorf("ZeroDivisionError", "division by zero")
			}
			return NewFloat(float64(x) / float64(y)), nil
		case "//", "%":
			if y == 0 {
				return Value{}, errorf("ZeroDivisionError", "integer division or modulo by zero")
			}
			q, r := x/y, x%y
			if r != 0 && (r < 0) != (y < 0) {
				q--
				r += y
			}
			if op == "//" {
				return NewInt(q), nil
			}
			return NewInt(r), nil
		case "**":
			if y < 0 {
				if x == 0 {
					return Value{}, errorf("ZeroDivisionError", "0.0 cannot be raised to a negative power")
				}
				return NewFloat(math.Pow(float64(x), float64(y))), nil
			}
			r := int64(1)
			base := x
			for y > 0 {
				if y&1 == 1 {
					hi, lo := bits.Mul64(uint64(abs64(r)), uint64(abs64(base)))
					if hi != 0 || lo > math.MaxInt64 {
						return Value{}, overflow()
					}
					r *= base
				}
				y >>= 1
				if y > 0 {
					hi, lo := bits.Mul64(uint64(abs64(base)), uint64(abs64(base)))
					if hi != 0 || lo > math.MaxInt64 {
						return Value{}, overflow()
					}
					base *= base
				}
			}
			return NewInt(r), nil
		}
	}
	x, y := toFloat(a), toFloat(b)
	switch op {
	case "+":
		return NewFloat(x + y), nil
	case "-":
		return NewFloat(x - y), nil
	case "*":
		return NewFloat(x * y), nil
	case "/":
		if y == 0 {
			return Value{}, errorf("ZeroDivisionError", "float division by zero")
		}
		return NewFloat(x / y), nil
	case "//":
		if y == 0 {
			return Value{}, errorf("ZeroDivisionError", "float floor division by zero")
		}
		return NewFloat(math.Floor(x / y)), nil
	case "%":
		if y == 0 {
			return Value{}, errorf("ZeroDivisionError", "float modulo")
		}
		m := math.Mod(x, y)
		if m != 0 && (m < 0) != (y < 0) {
			m += y
		}
		return NewFloat(m), nil
	case "**":
		if x == 0 && y < 0 {
			return Value{}, errorf("ZeroDivisionError", "0.0 cannot be raised to a negative power")
		}
		return NewFloat(math.Pow(x, y)), nil
	}
	return Value{}, opTypeError(op, a, b)
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// escapeString is markupsafe's escape.
func escapeString(s string) string {
	if !strings.ContainsAny(s, `&<>"'`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&#34;")
		case '\'':
			b.WriteString("&#39;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// escape is markupsafe.escape(v): Markup is kept, anything else is
// turned into a string and escaped.
func (e *evaluator) escape(v Value) (Value, error) {
	if v.IsSafe() {
		return v, nil
	}
	s, err := e.str(v)
	if err != nil {
		return Value{}, err
	}
	return NewMarkup(escapeString(s)), nil
}

// =============================================================================
// printf-style formatting: str % args
// =============================================================================

func (e *evaluator) printf(format string, arg Value, safe bool) (string, error) {
	var args []Value
	var mapping *Dict
	switch {
	case arg.kind == KindList && arg.v.(*List).Tuple:
		args = arg.v.(*List).Items
	case arg.kind == KindDict:
		mapping = arg.v.(*Dict)
		args = []Value{arg}
	default:
		args = []Value{arg}
	}
	next := 0
	usedMapping := false
	var b strings.Builder
	for i := 0; i < len(format); {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			i++
			continue
		}
		i++
		if i >= len(format) {
			return "", errorf("ValueError", "incomplete format")
		}
		var v Value
		haveV := false
		if format[i] == '(' {
			j := strings.IndexByte(format[i:], ')')
			if j < 0 {
				return "", errorf("ValueError", "incomplete format key")
			}
			if mapping == nil {
				return "", errorf("TypeError", "format requires a mapping")
			}
			key := format[i+1 : i+j]
			x, ok := mapping.Get(key)
			if !ok {
				return "", errorf("KeyError", "%s", pyReprString(key))
			}
			v, haveV, usedMapping = x, true, true
			i += j + 1
		}
		flags := ""
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			flags += string(format[i])
			i++
		}
		take := func() (Value, error) {
			if next >= len(args) {
				return Value{}, errorf("TypeError", "not enough arguments for format string")
			}
			next++
			return args[next-1], nil
		}
		width := ""
		if i < len(format) && format[i] == '*' {
			w, err := take()
			if err != nil {
				return "", err
			}
			width = itoa(toInt(w))
			i++
		}
		for i < len(format) && isDigit(format[i]) {
			width += string(format[i])
			i++
		}
		prec := ""
		if i < len(format) && format[i] == '.' {
			prec = "."
			i++
			for i < len(format) && isDigit(format[i]) {
				prec += string(format[i])
				i++
			}
		}
		for _, n := range []string{strings.TrimPrefix(width, "-"), strings.TrimPrefix(prec, ".")} {
			if v, err := strconv.Atoi(n); n != "" && (err != nil || v > e.lim.MaxStringBytes) {
				return "", e.grow(e.lim.MaxStringBytes + 1)
			}
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return "", errorf("ValueError", "incomplete format")
		}
		conv := format[i]
		i++
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveV {
			var err error
			if v, err = take(); err != nil {
				return "", err
			}
		}
		spec := "%" + flags + width + prec
		var out string
		switch conv {
		case 's', 'r', 'a':
			var s string
			var err error
			if conv == 's' {
				s, err = e.str(v)
			} else {
				var rb strings.Builder
				err = e.repr(&rb, v, 0)
				s = rb.String()
			}
			if err != nil {
				return "", err
			}
			if safe && !v.IsSafe() {
				s = escapeString(s)
			}
			out = fmt.Sprintf("%"+strings.ReplaceAll(flags, "0", "")+width+prec+"s", s)
		case 'd', 'i', 'u':
			if !isNumeric(v) {
				return "", errorf("TypeError", "%%%c format: a real number is required, not %s", conv, typeName(v))
			}
			out = fmt.Sprintf(spec+"d", toInt(v))
		case 'x', 'X', 'o':
			if !isIntLike(v) {
				return "", errorf("TypeError", "%%%c format: an integer is required, not %s", conv, typeName(v))
			}
			out = fmt.Sprintf(spec+string(conv), toInt(v))
		case 'e', 'E', 'f', 'F', 'g', 'G':
			if !isNumeric(v) {
				return "", errorf("TypeError", "must be real number, not %s", typeName(v))
			}
			if prec == "" {
				spec += ".6"
			}
			out = fmt.Sprintf(spec+string(conv), toFloat(v))
		case 'c':
			switch {
			case isIntLike(v):
				out = string(rune(toInt(v)))
			case v.kind == KindString && utf8.RuneCountInString(v.v.(string)) == 1:
				out = v.v.(string)
			default:
				return "", errorf("TypeError", "%%c requires int or char")
			}
		default:
			return "", errorf("ValueError", "unsupported format character %s (0x%x) at index %d", pyReprString(string(conv)), conv, i-1)
		}
		b.WriteString(out)
		if err := e.grow(b.Len()); err != nil {
			return "", err
		}
	}
	if mapping == nil && next < len(args) {
		return "", errorf("TypeError", "not all arguments converted during string formatting")
	}
	_ = usedMapping
	return b.String(), nil
}

// =============================================================================
// str.format
// =============================================================================

func (e *evaluator) strFormat(format string, args []Value, kw kwargs, safe bool) (string, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(format); {
		c := format[i]
		switch {
		case c == '{' && i+1 < len(format) && format[i+1] == '{':
			b.WriteByte('{')
			i += 2
			continue
		case c == '}' && i+1 < len(format) && format[i+1] == '}':
			b.WriteByte('}')
			i += 2
			continue
		case c == '}':
			return "", errorf("ValueError", "Single '}' encountered in format string")
		case c != '{':
			b.WriteByte(c)
			i++
			continue
		}
		// A replacement field: {name[.attr|[key]]...[!conv][:spec]}.
		depth, j := 1, i+1
		for j < len(format) && depth > 0 {
			switch format[j] {
			case '{':
				depth++
			case '}':
				depth--
			}
			j++
		}
		if depth > 0 {
			return "", errorf("ValueError", "expected '}' before end of string")
		}
		field := format[i+1 : j-1]
		i = j
		spec := ""
		if k := strings.IndexByte(field, ':'); k >= 0 {
			field, spec = field[:k], field[k+1:]
		}
		conv := byte(0)
		if k := strings.IndexByte(field, '!'); k >= 0 {
			if k+2 != len(field) {
				return "", errorf("ValueError", "expected ':' after conversion specifier")
			}
			field, conv = field[:k], field[k+1]
		}
		name := field
		rest := ""
		if k := strings.IndexAny(field, ".["); k >= 0 {
			name, rest = field[:k], field[k:]
		}
		var v Value
		switch {
		case name == "":
			if auto < 0 {
				return "", errorf("ValueError", "cannot switch from manual field specification to automatic field numbering")
			}
			if auto >= len(args) {
				return "", errorf("IndexError", "Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case isAllDigits(name):
			if auto > 0 {
				return "", errorf("ValueError", "cannot switch from automatic field numbering to manual field specification")
			}
			auto = -1
			n, _ := strconv.Atoi(name)
			if n >= len(args) {
				return "", errorf("IndexError", "Replacement index %d out of range for positional args tuple", n)
			}
			v = args[n]
		default:
			x, ok := kw.get(name)
			if !ok {
				return "", errorf("KeyError", "%s", pyReprString(name))
			}
			v = x
		}
		for rest != "" {
			var err error
			if rest[0] == '.' {
				k := strings.IndexAny(rest[1:], ".[")
				attr := rest[1:]
				if k >= 0 {
					attr, rest = rest[1:k+1], rest[k+1:]
				} else {
					rest = ""
				}
				v, err = e.getattr(v, attr)
			} else {
				k := strings.IndexByte(rest, ']')
				if k < 0 {
					return "", errorf("ValueError", "Missing ']' in format string")
				}
				key := rest[1:k]
				rest = rest[k+1:]
				kv := NewString(key)
				if isAllDigits(key) {
					n, _ := strconv.ParseInt(key, 10, 64)
					kv = NewInt(n)
				}
				v, err = e.getitem(v, kv)
			}
			if err != nil {
				return "", err
			}
		}
		switch conv {
		case 0:
		case 's':
			s, err := e.str(v)
			if err != nil {
				return "", err
			}
			v = NewString(s)
		case 'r', 'a':
			var rb strings.Builder
			if err := e.repr(&rb, v, 0); err != nil {
				return "", err
			}
			v = NewString(rb.String())
		default:
			return "", errorf("ValueError", "Unknown conversion specifier %c", conv)
		}
		if strings.Contains(spec, "{") {
			var err error
			if spec, err = e.strFormat(spec, args, kw, false); err != nil {
				return "", err
			}
		}
		s, err := e.formatSpec(v, spec)
		if err != nil {
			return "", err
		}
		if safe && !v.IsSafe() {
			s = escapeString(s)
		}
		b.WriteString(s)
		if err := e.grow(b.Len()); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func isAllDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// formatSpec is Python's format(v, spec) for the common specs:
// [[fill]align][sign][#][0][width][,|_][.precision][type].
func (e *evaluator) formatSpec(v Value, spec string) (string, error) {
	if spec == "" {
		return e.str(v)
	}
	r := []rune(spec)
	i := 0
	fill, align := ' ', rune(0)
	if len(r) >= 2 && strings.ContainsRune("<>^=", r[1]) {
		fill, align = r[0], r[1]
		i = 2
	} else if len(r) >= 1 && strings.ContainsRune("<>^=", r[0]) {
		align = r[0]
		i = 1
	}
	sign := rune(0)
	if i < len(r) && strings.ContainsRune("+- ", r[i]) {
		sign = r[i]
		i++
	}
	alt := false
	if i < len(r) && r[i] == '#' {
		alt = true
		i++
	}
	if i < len(r) && r[i] == '0' {
		if align == 0 {
			fill, align = '0', '='
		}
		i++
	}
	width := 0
	for i < len(r) && r[i] >= '0' && r[i] <= '9' {
		width = width*10 + int(r[i]-'0')
		i++
		if width > e.lim.MaxStringBytes {
			return "", e.grow(e.lim.MaxStringBytes + 1)
		}
	}
	group := rune(0)
	if i < len(r) && (r[i] == ',' || r[i] == '_') {
		group = r[i]
		i++
	}
	prec := -1
	if i < len(r) && r[i] == '.' {
		i++
		prec = 0
		for i < len(r) && r[i] >= '0' && r[i] <= '9' {
			prec = prec*10 + int(r[i]-'0')
			i++
			if prec > e.lim.MaxStringBytes {
				return "", e.grow(e.lim.MaxStringBytes + 1)
			}
		}
	}
	typ := rune(0)
	if i < len(r) {
		typ = r[i]
		i++
	}
	if i != len(r) {
		return "", errorf("ValueError", "Invalid format specifier %s", pyReprString(spec))
	}
	var body, signStr string
	numeric := false
	switch {
	case v.kind == KindString:
		if typ != 0 && typ != 's' {
			return "", errorf("ValueError", "Unknown format code '%c' for object of type 'str'", typ)
		}
		body = v.v.(string)
		if prec >= 0 {
			if rs := []rune(body); len(rs) > prec {
				body = string(rs[:prec])
			}
		}
		if align == 0 {
			align = '<'
		}
	case isNumeric(v) && (v.kind != KindFloat) && (typ == 0 || strings.ContainsRune("dbxXoncs", typ)) && typ != 's':
		numeric = true
		n := toInt(v)
		if typ == 'c' {
			body = string(rune(n))
			break
		}
		if n < 0 {
			signStr, n = "-", -n
		}
		base := map[rune]int{'b': 2, 'o': 8, 'x': 16, 'X': 16}[typ]
		if base == 0 {
			base = 10
		}
		body = strconv.FormatUint(uint64(n), base)
		if typ == 'X' {
			body = strings.ToUpper(body)
		}
		if alt && base != 10 {
			signStr += map[int]string{2: "0b", 8: "0o", 16: "0x"}[base]
			if typ == 'X' {
				signStr = strings.ToUpper(signStr)
			}
		}
		if group != 0 {
			body = groupDigits(body, group)
		}
	case isNumeric(v):
		numeric = true
		f := toFloat(v)
		if math.Signbit(f) && !math.IsNaN(f) {
			signStr, f = "-", -f
		}
		switch typ {
		case 'f', 'F', 'e', 'E', 'g', 'G':
			p := prec
			if p < 0 {
				p = 6
			}
			body = strconv.FormatFloat(f, byte(typ|0x20), p, 64)
			if typ == 'g' || typ == 'G' {
				body = strconv.FormatFloat(f, 'g', max(p, 1), 64)
			}
			if typ == 'E' || typ == 'G' || typ == 'F' {
				body = strings.ToUpper(body)
			}
		case '%':
			p := prec
			if p < 0 {
				p = 6
			}
			body = strconv.FormatFloat(f*100, 'f', p, 64) + "%"
		case 0:
			if prec >= 0 {
				body = strconv.FormatFloat(f, 'g', max(prec, 1), 64)
			} else {
				body = formatFloat(f)
			}
		default:
			return "", errorf("ValueError", "Unknown format code '%c' for object of type 'float'", typ)
		}
		if group != 0 {
			intPart, frac, _ := strings.Cut(body, ".")
			body = groupDigits(intPart, group)
			if frac != "" {
				body += "." + frac
			}
		}
	default:
		s, err := e.str(v)
		if err != nil {
			return "", err
		}
		if typ != 0 {
			return "", errorf("TypeError", "unsupported format string passed to %s.__format__", typeName(v))
		}
		body = s
		if align == 0 {
			align = '<'
		}
	}
	if numeric {
		if signStr == "" || signStr[0] != '-' {
			switch sign {
			case '+':
				signStr = "+" + signStr
			case ' ':
				signStr = " " + signStr
			}
		}
		if align == 0 {
			align = '>'
		}
	}
	n := utf8.RuneCountInString(signStr + body)
	pad := width - n
	if pad <= 0 {
		return signStr + body, nil
	}
	f := string(fill)
	switch align {
	case '<':
		return signStr + body + strings.Repeat(f, pad), nil
	case '^':
		return strings.Repeat(f, pad/2) + signStr + body + strings.Repeat(f, pad-pad/2), nil
	case '=':
		return signStr + strings.Repeat(f, pad) + body, nil
	}
	return strings.Repeat(f, pad) + signStr + body, nil
}

func groupDigits(s string, sep rune) string {
	if len(s) <= 3 {
		return s
	}
	var parts []string
	for len(s) > 3 {
		parts = append([]string{s[len(s)-3:]}, parts...)
		s = s[:len(s)-3]
	}
	parts = append([]string{s}, parts...)
	return strings.Join(parts, string(sep))
}

// sortValues sorts items stably by keys with Python's <, failing as
// Python's sorted does on values it cannot compare.
func (e *evaluator) sortValues(items []Value, keys []Value, reverse bool) error {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	sort.SliceStable(idx, func(x, y int) bool {
		if err != nil {
			return false
		}
		a, b := keys[idx[x]], keys[idx[y]]
		if reverse {
			a, b = b, a
		}
		if a.kind == KindUndefined || b.kind == KindUndefined {
			u := a
			if b.kind == KindUndefined {
				u = b
			}
			err = undefinedError(u)
			return false
		}
		lt, ok, e2 := e.less(a, b, 0)
		if e2 != nil {
			err = e2
			return false
		}
		if !ok {
			err = errorf("TypeError", "'<' not supported between instances of %s and %s", pyReprString(typeName(a)), pyReprString(typeName(b)))
			return false
		}
		return lt
	})
	if err != nil {
		return err
	}
	sorted := make([]Value, len(items))
	sortedKeys := make([]Value, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
		sortedKeys[i] = keys[j]
	}
	copy(items, sorted)
	copy(keys, sortedKeys)
	return nil
}
