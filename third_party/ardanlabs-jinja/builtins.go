// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"html"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Jinja2's filters, tests and globals (jinja2/filters.py, tests.py,
// defaults.py and sandbox.py), with transformers' tojson, raise_exception
// and strftime_now.

type filterFunc func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error)

type testFunc func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error)

var (
	filters map[string]filterFunc
	tests   map[string]testFunc
	globals map[string]Value
)

// softStr is Jinja2's soft_str: a string (Markup stays Markup), else str().
func (e *evaluator) softStr(v Value) (Value, error) {
	if v.kind == KindString {
		return v, nil
	}
	s, err := e.str(v)
	return NewString(s), err
}

// attrGetter is Jinja2's make_attrgetter: dotted paths, integer parts
// looked up as integers, an optional default for undefined results and
// lower-casing of strings for case-insensitive keys.
func (e *evaluator) attrGetter(attribute Value, lower bool, def Value) func(Value) (Value, error) {
	var parts []Value
	switch attribute.kind {
	case KindNone:
	case KindString:
		for _, p := range strings.Split(attribute.v.(string), ".") {
			if isAllDigits(p) {
				n, _ := strconv.ParseInt(p, 10, 64)
				parts = append(parts, NewInt(n))
			} else {
				parts = append(parts, NewString(p))
			}
		}
	default:
		parts = []Value{attribute}
	}
	return func(item Value) (Value, error) {
		var err error
		for _, p := range parts {
			if item, err = e.getitem(item, p); err != nil {
				return Value{}, err
			}
			if def.kind != KindNone && item.kind == KindUndefined {
				item = def
			}
		}
		if lower && item.kind == KindString {
			item = Value{kind: KindString, safe: item.safe, v: pyLower(item.v.(string))}
		}
		return item, nil
	}
}

// multiAttrGetter is make_multi_attrgetter: "a,b" gives [a, b].
func (e *evaluator) multiAttrGetter(attribute Value, lower bool) func(Value) (Value, error) {
	if attribute.kind != KindString || !strings.Contains(attribute.v.(string), ",") {
		if attribute.kind == KindNone {
			return func(item Value) (Value, error) {
				if lower && item.kind == KindString {
					item = Value{kind: KindString, safe: item.safe, v: pyLower(item.v.(string))}
				}
				return NewList([]Value{item}), nil
			}
		}
		g := e.attrGetter(attribute, lower, None())
		return func(item Value) (Value, error) {
			v, err := g(item)
			return NewList([]Value{v}), err
		}
	}
	var gs []func(Value) (Value, error)
	for _, a := range strings.Split(attribute.v.(string), ",") {
		gs = append(gs, e.attrGetter(NewString(a), lower, None()))
	}
	return func(item Value) (Value, error) {
		out := make([]Value, len(gs))
		for i, g := range gs {
			v, err := g(item)
			if err != nil {
				return Value{}, err
			}
			out[i] = v
		}
		return NewList(out), nil
	}
}

func (e *evaluator) callTest(name Value, item Value, args []Value, kw kwargs) (bool, error) {
	n, _ := name.v.(string)
	t, ok := tests[n]
	if name.kind != KindString || !ok {
		s, _ := reprValue(name, 0)
		return false, errorf("TemplateRuntimeError", "No test named %s.", s)
	}
	return t(e, item, args, kw)
}

func (e *evaluator) callFilter(name Value, item Value, args []Value, kw kwargs) (Value, error) {
	n, _ := name.v.(string)
	f, ok := filters[n]
	if name.kind != KindString || !ok {
		s, _ := reprValue(name, 0)
		return Value{}, errorf("TemplateRuntimeError", "No filter named %s.", s)
	}
	return f(e, item, args, kw)
}

// selectOrReject is select, reject, selectattr and rejectattr.
func selectOrReject(keep bool, byAttr bool) filterFunc {
	return func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		if !v.IsTruthy() {
			// "if value:" — none, an empty list, an undefined value
			// give nothing, whatever the arguments.
			return newGenerator(nil), nil
		}
		items, err := e.iterate(v)
		if err != nil {
			return Value{}, err
		}
		trans := func(x Value) (Value, error) { return x, nil }
		off := 0
		if byAttr {
			if len(args) == 0 {
				return Value{}, errorf("FilterArgumentError", "Missing parameter for attribute name")
			}
			trans = e.attrGetter(args[0], false, None())
			off = 1
		}
		var test func(Value) (bool, error)
		if len(args) > off {
			name, rest := args[off], args[off+1:]
			test = func(x Value) (bool, error) { return e.callTest(name, x, rest, kw) }
		} else {
			test = func(x Value) (bool, error) { return x.IsTruthy(), nil }
		}
		var out []Value
		for _, item := range items {
			if err := e.step(1); err != nil {
				return Value{}, err
			}
			x, err := trans(item)
			if err != nil {
				return Value{}, err
			}
			ok, err := test(x)
			if err != nil {
				return Value{}, err
			}
			if ok == keep {
				out = append(out, item)
			}
		}
		return newGenerator(out), nil
	}
}

// minMax is the min and max filters.
func minMax(wantMax bool) filterFunc {
	name := "min"
	if wantMax {
		name = "max"
	}
	return func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("do_"+name, args, kw, []string{"case_sensitive", "attribute"}, NewBool(false), None())
		if err != nil {
			return Value{}, err
		}
		items, err := e.iterate(v)
		if err != nil {
			return Value{}, err
		}
		if len(items) == 0 {
			return undefinedHint("No aggregated item, sequence was empty."), nil
		}
		key := e.attrGetter(a[1], !a[0].IsTruthy(), None())
		best := items[0]
		bestKey, err := key(best)
		if err != nil {
			return Value{}, err
		}
		for _, item := range items[1:] {
			k, err := key(item)
			if err != nil {
				return Value{}, err
			}
			x, y := bestKey, k
			if wantMax {
				x, y = k, bestKey
			}
			// min keeps the first of equal items, max too.
			lt, ok, err := e.less(y, x, 0)
			if err != nil {
				return Value{}, err
			}
			if !ok {
				return Value{}, errorf("TypeError", "'<' not supported between instances of %s and %s", pyReprString(typeName(y)), pyReprString(typeName(x)))
			}
			if (!wantMax && lt) || (wantMax && lt) {
				best, bestKey = item, k
			}
		}
		return best, nil
	}
}

var wordRe = regexp.MustCompile(`[\p{L}\p{N}_]+`)

func init() {
	filters = map[string]filterFunc{
		"abs": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			switch v.kind {
			case KindInt, KindBool:
				n := toInt(v)
				if n == math.MinInt64 {
					return Value{}, overflow()
				}
				return NewInt(abs64(n)), nil
			case KindFloat:
				return NewFloat(math.Abs(v.v.(float64))), nil
			}
			return Value{}, errorf("TypeError", "bad operand type for abs(): %s", pyReprString(typeName(v)))
		},
		"attr": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_attr", args, kw, []string{"name"})
			if err != nil {
				return Value{}, err
			}
			name, err := e.str(a[0])
			if err != nil {
				return Value{}, err
			}
			if v.kind == KindUndefined {
				return Value{}, undefinedError(v)
			}
			if x, ok := e.pyAttr(v, name); ok {
				return x, nil
			}
			return undefinedItem(v, NewString(name)), nil
		},
		"batch": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_batch", args, kw, []string{"linecount", "fill_with"}, None())
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			n, err := intArg("batch", a[0])
			if err != nil {
				return Value{}, err
			}
			var out []Value
			var tmp []Value
			for _, item := range items {
				if int64(len(tmp)) == n {
					out = append(out, NewList(tmp))
					tmp = nil
				}
				tmp = append(tmp, item)
			}
			if len(tmp) > 0 {
				for a[1].kind != KindNone && int64(len(tmp)) < n {
					if err := e.items(len(tmp)); err != nil {
						return Value{}, err
					}
					tmp = append(tmp, a[1])
				}
				out = append(out, NewList(tmp))
			}
			return newGenerator(out), nil
		},
		"capitalize": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: s.safe, v: pyCapitalize(s.v.(string))}, nil
		},
		"center": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_center", args, kw, []string{"width"}, NewInt(80))
			if err != nil {
				return Value{}, err
			}
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			return padMethod(e, s, []Value{a[0]}, nil, "center", 'c')
		},
		"default": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_default", args, kw, []string{"default_value", "boolean"}, NewString(""), NewBool(false))
			if err != nil {
				return Value{}, err
			}
			if v.kind == KindUndefined || (a[1].IsTruthy() && !v.IsTruthy()) {
				return a[0], nil
			}
			return v, nil
		},
		"dictsort": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_dictsort", args, kw, []string{"case_sensitive", "by", "reverse"}, NewBool(false), NewString("key"), NewBool(false))
			if err != nil {
				return Value{}, err
			}
			if v.kind == KindUndefined {
				return Value{}, undefinedError(v)
			}
			if v.kind != KindDict {
				return Value{}, errorf("AttributeError", "%s object has no attribute 'items'", pyReprString(typeName(v)))
			}
			pos := 0
			switch by, _ := a[1].v.(string); by {
			case "key":
			case "value":
				pos = 1
			default:
				return Value{}, errorf("FilterArgumentError", "You can only sort by either \"key\" or \"value\"")
			}
			d := v.v.(*Dict)
			items := make([]Value, len(d.Keys))
			keys := make([]Value, len(d.Keys))
			for i, k := range d.Keys {
				items[i] = newTuple([]Value{d.keyValue(k), d.Data[k]})
				keys[i] = items[i].v.(*List).Items[pos]
				if !a[0].IsTruthy() && keys[i].kind == KindString {
					keys[i] = NewString(pyLower(keys[i].v.(string)))
				}
			}
			if err := e.sortValues(items, keys, a[2].IsTruthy()); err != nil {
				return Value{}, err
			}
			return NewList(items), nil
		},
		"escape": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			if _, err := argSpec("escape", args, kw, nil); err != nil {
				return Value{}, err
			}
			return e.escape(v)
		},
		"first": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			if v.kind == KindList && v.v.(*List).gen {
				l := v.v.(*List)
				if len(l.Items) == 0 {
					return undefinedHint("No first item, sequence was empty."), nil
				}
				first := l.Items[0]
				l.Items = l.Items[1:]
				return first, nil
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			if len(items) == 0 {
				return undefinedHint("No first item, sequence was empty."), nil
			}
			return items[0], nil
		},
		"float": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_float", args, kw, []string{"default"}, NewFloat(0))
			if err != nil {
				return Value{}, err
			}
			switch v.kind {
			case KindFloat:
				return v, nil
			case KindInt, KindBool:
				return NewFloat(float64(toInt(v))), nil
			case KindString:
				if f, ok := parsePyFloat(v.v.(string)); ok {
					return NewFloat(f), nil
				}
			case KindUndefined:
				return Value{}, undefinedError(v)
			}
			return a[0], nil
		},
		"forceescape": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.str(v)
			return NewMarkup(escapeString(s)), err
		},
		"format": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			if len(args) > 0 && len(kw) > 0 {
				return Value{}, errorf("FilterArgumentError", "can't handle positional and keyword arguments at the same time")
			}
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			var arg Value
			if len(kw) > 0 {
				arg = NewDict()
				for _, p := range kw {
					arg.AsDict().Set(p.name, p.value)
				}
			} else {
				arg = newTuple(args)
			}
			return e.binOp("%", s, arg)
		},
		"groupby": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_groupby", args, kw, []string{"attribute", "default", "case_sensitive"}, None(), NewBool(false))
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			items = append([]Value(nil), items...)
			cs := a[2].IsTruthy()
			key := e.attrGetter(a[0], !cs, a[1])
			keys := make([]Value, len(items))
			for i, item := range items {
				if keys[i], err = key(item); err != nil {
					return Value{}, err
				}
			}
			if err := e.sortValues(items, keys, false); err != nil {
				return Value{}, err
			}
			out := e.attrGetter(a[0], false, a[1])
			var groups []Value
			for i := 0; i < len(items); {
				j := i + 1
				for j < len(items) {
					eq, err := e.equal(keys[i], keys[j], 0)
					if err != nil {
						return Value{}, err
					}
					if !eq {
						break
					}
					j++
				}
				grouper := keys[i]
				if !cs {
					if grouper, err = out(items[i]); err != nil {
						return Value{}, err
					}
				}
				groups = append(groups, Value{kind: KindList, v: &List{
					Items: []Value{grouper, NewList(append([]Value(nil), items[i:j]...))},
					Tuple: true, fields: []string{"grouper", "list"},
				}})
				i = j
			}
			return NewList(groups), nil
		},
		"indent": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_indent", args, kw, []string{"width", "first", "blank"}, NewInt(4), NewBool(false), NewBool(false))
			if err != nil {
				return Value{}, err
			}
			var ind string
			if a[0].kind == KindString {
				ind = a[0].v.(string)
			} else {
				x, err := e.binOp("*", NewString(" "), a[0])
				if err != nil {
					return Value{}, err
				}
				ind = x.v.(string)
			}
			sv, err := e.binOp("+", v, NewString("\n"))
			if err != nil {
				return Value{}, err
			}
			s := sv.v.(string)
			lines := pySplitlines(s, false)
			var rv string
			if a[2].IsTruthy() {
				rv = strings.Join(lines, "\n"+ind)
			} else {
				rv = lines[0]
				if len(lines) > 1 {
					rest := make([]string, len(lines)-1)
					for i, l := range lines[1:] {
						if l != "" {
							l = ind + l
						}
						rest[i] = l
					}
					rv += "\n" + strings.Join(rest, "\n")
				}
			}
			if a[1].IsTruthy() {
				rv = ind + rv
			}
			if err := e.grow(len(rv)); err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: v.safe, v: rv}, nil
		},
		"int": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_int", args, kw, []string{"default", "base"}, NewInt(0), NewInt(10))
			if err != nil {
				return Value{}, err
			}
			switch v.kind {
			case KindInt, KindBool:
				return NewInt(toInt(v)), nil
			case KindFloat:
				f := v.v.(float64)
				if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 9.2e18 {
					return a[0], nil
				}
				return NewInt(int64(f)), nil
			case KindString:
				s := strings.TrimFunc(v.v.(string), pyIsSpace)
				base := toInt(a[1])
				if n, ok := parsePyInt(s, base); ok {
					return NewInt(n), nil
				}
				if f, ok := parsePyFloat(s); ok && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) < 9.2e18 {
					return NewInt(int64(f)), nil
				}
			case KindUndefined:
				return Value{}, undefinedError(v)
			}
			return a[0], nil
		},
		"items": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			switch v.kind {
			case KindUndefined:
				return newGenerator(nil), nil
			case KindDict:
				d := v.v.(*Dict)
				items := make([]Value, len(d.Keys))
				for i, k := range d.Keys {
					items[i] = newTuple([]Value{d.keyValue(k), d.Data[k]})
				}
				return newGenerator(items), nil
			}
			return Value{}, errorf("TypeError", "Can only get item pairs from a mapping.")
		},
		"join": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_join", args, kw, []string{"d", "attribute"}, NewString(""), None())
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			sep, err := e.str(a[0])
			if err != nil {
				return Value{}, err
			}
			get := func(x Value) (Value, error) { return x, nil }
			if a[1].kind != KindNone {
				get = e.attrGetter(a[1], false, None())
			}
			var b strings.Builder
			for i, item := range items {
				x, err := get(item)
				if err != nil {
					return Value{}, err
				}
				s, err := e.str(x)
				if err != nil {
					return Value{}, err
				}
				if i > 0 {
					b.WriteString(sep)
				}
				b.WriteString(s)
				if err := e.grow(b.Len()); err != nil {
					return Value{}, err
				}
			}
			return NewString(b.String()), nil
		},
		"last": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			switch v.kind {
			case KindList:
				if l := v.v.(*List); l.gen || l.view != "" {
					return Value{}, errorf("TypeError", "%s object is not reversible", pyReprString(typeName(v)))
				}
			case KindString, KindDict, KindUndefined:
			default:
				return Value{}, errorf("TypeError", "%s object is not reversible", pyReprString(typeName(v)))
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			if len(items) == 0 {
				return undefinedHint("No last item, sequence was empty."), nil
			}
			return items[len(items)-1], nil
		},
		"length": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			if _, err := argSpec("len", args, kw, nil); err != nil {
				return Value{}, err
			}
			switch v.kind {
			case KindString:
				return NewInt(int64(utf8.RuneCountInString(v.v.(string)))), nil
			case KindList:
				if l := v.v.(*List); !l.gen {
					return NewInt(int64(len(l.Items))), nil
				}
			case KindDict:
				return NewInt(int64(v.v.(*Dict).Len())), nil
			case KindUndefined:
				return NewInt(0), nil
			}
			return Value{}, errorf("TypeError", "object of type %s has no len()", pyReprString(typeName(v)))
		},
		"list": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			return NewList(append([]Value(nil), items...)), nil
		},
		"lower": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: s.safe, v: pyLower(s.v.(string))}, nil
		},
		"upper": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			return Value{kind: KindString, safe: s.safe, v: pyUpper(s.v.(string))}, nil
		},
		"map": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			if !v.IsTruthy() {
				return newGenerator(nil), nil
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			var fn func(Value) (Value, error)
			if attr, ok := kw.get("attribute"); ok && len(args) == 0 {
				rest := kw
				rest.pop("attribute")
				def, _ := rest.pop("default")
				if def.kind == KindUndefined && def.v == nil {
					def = None()
				}
				if len(rest) > 0 {
					return Value{}, errorf("FilterArgumentError", "Unexpected keyword argument %s", pyReprString(rest[0].name))
				}
				fn = e.attrGetter(attr, false, def)
			} else {
				if len(args) == 0 {
					return Value{}, errorf("FilterArgumentError", "map requires a filter argument")
				}
				name, rest := args[0], args[1:]
				fn = func(x Value) (Value, error) { return e.callFilter(name, x, rest, kw) }
			}
			out := make([]Value, len(items))
			for i, item := range items {
				if err := e.step(1); err != nil {
					return Value{}, err
				}
				if out[i], err = fn(item); err != nil {
					return Value{}, err
				}
			}
			return newGenerator(out), nil
		},
		"max":        minMax(true),
		"min":        minMax(false),
		"reject":     selectOrReject(false, false),
		"rejectattr": selectOrReject(false, true),
		"select":     selectOrReject(true, false),
		"selectattr": selectOrReject(true, true),
		"replace": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_replace", args, kw, []string{"old", "new", "count"}, None())
			if err != nil {
				return Value{}, err
			}
			var strs [3]string
			for i, x := range []Value{v, a[0], a[1]} {
				if strs[i], err = e.str(x); err != nil {
					return Value{}, err
				}
			}
			count := int64(-1)
			if a[2].kind != KindNone {
				if count, err = intArg("replace", a[2]); err != nil {
					return Value{}, err
				}
			}
			s, old, nw := strs[0], strs[1], strs[2]
			if c := strings.Count(s, old); c > 0 && len(nw) > len(old) {
				if err := e.grow(len(s) + c*(len(nw)-len(old))); err != nil {
					return Value{}, err
				}
			}
			return NewString(strings.Replace(s, old, nw, int(count))), nil
		},
		"reverse": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			if v.kind == KindString {
				r := []rune(v.v.(string))
				for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
					r[i], r[j] = r[j], r[i]
				}
				return Value{kind: KindString, safe: v.safe, v: string(r)}, nil
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, errorf("FilterArgumentError", "argument must be iterable")
			}
			out := make([]Value, len(items))
			for i, x := range items {
				out[len(items)-1-i] = x
			}
			if v.kind == KindList && v.v.(*List).gen {
				return NewList(out), nil // list(value); rv.reverse()
			}
			return newGenerator(out), nil // a reverse iterator
		},
		"round": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_round", args, kw, []string{"precision", "method"}, NewInt(0), NewString("common"))
			if err != nil {
				return Value{}, err
			}
			method, _ := a[1].v.(string)
			if method != "common" && method != "ceil" && method != "floor" {
				return Value{}, errorf("FilterArgumentError", "method must be common, ceil or floor")
			}
			p, err := intArg("round", a[0])
			if err != nil {
				return Value{}, err
			}
			if !isNumeric(v) {
				if v.kind == KindUndefined {
					return Value{}, errorf("TypeError", "type Undefined doesn't define __round__ method")
				}
				return Value{}, errorf("TypeError", "type %s doesn't define __round__ method", typeName(v))
			}
			if method == "common" {
				if v.kind != KindFloat {
					if p >= 0 {
						return NewInt(toInt(v)), nil
					}
					m := int64(math.Pow(10, float64(-p)))
					n := toInt(v)
					q := n / m
					r := n - q*m
					if r < 0 {
						q--
						r += m
					}
					if 2*r > m || (2*r == m && q%2 != 0) {
						q++
					}
					return NewInt(q * m), nil
				}
				return NewFloat(pyRound(v.v.(float64), int(p))), nil
			}
			scale := math.Pow(10, float64(p))
			x := toFloat(v) * scale
			if method == "ceil" {
				x = math.Ceil(x)
			} else {
				x = math.Floor(x)
			}
			return NewFloat(x / scale), nil
		},
		"safe": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.str(v)
			return NewMarkup(s), err
		},
		"slice": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_slice", args, kw, []string{"slices", "fill_with"}, None())
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			slices, err := intArg("slice", a[0])
			if err != nil {
				return Value{}, err
			}
			if slices <= 0 {
				return Value{}, errorf("ZeroDivisionError", "integer division or modulo by zero")
			}
			if err := e.items(int(min(slices, int64(e.lim.MaxItems)+1))); err != nil {
				return Value{}, err
			}
			n := int64(len(items))
			per, extra := n/slices, n%slices
			offset := int64(0)
			var out []Value
			for i := int64(0); i < slices; i++ {
				start := offset + i*per
				if i < extra {
					offset++
				}
				end := offset + (i+1)*per
				tmp := append([]Value(nil), items[start:end]...)
				if a[1].kind != KindNone && i >= extra {
					tmp = append(tmp, a[1])
				}
				out = append(out, NewList(tmp))
			}
			return newGenerator(out), nil
		},
		"sort": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_sort", args, kw, []string{"reverse", "case_sensitive", "attribute"}, NewBool(false), NewBool(false), None())
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			items = append([]Value(nil), items...)
			key := e.multiAttrGetter(a[2], !a[1].IsTruthy())
			keys := make([]Value, len(items))
			for i, item := range items {
				if keys[i], err = key(item); err != nil {
					return Value{}, err
				}
			}
			if err := e.sortValues(items, keys, a[0].IsTruthy()); err != nil {
				return Value{}, err
			}
			return NewList(items), nil
		},
		"string": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			return e.softStr(v)
		},
		"striptags": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.str(v)
			if err != nil {
				return Value{}, err
			}
			s = commentRe.ReplaceAllString(s, "")
			s = tagRe.ReplaceAllString(s, "")
			s = strings.Join(pySplit(s, nil, -1, false), " ")
			return NewString(html.UnescapeString(s)), nil
		},
		"sum": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_sum", args, kw, []string{"attribute", "start"}, None(), NewInt(0))
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			get := func(x Value) (Value, error) { return x, nil }
			if a[0].kind != KindNone {
				get = e.attrGetter(a[0], false, None())
			}
			acc := a[1]
			if acc.kind == KindString {
				return Value{}, errorf("TypeError", "sum() can't sum strings [use ''.join(seq) instead]")
			}
			for _, item := range items {
				x, err := get(item)
				if err != nil {
					return Value{}, err
				}
				if acc, err = e.binOp("+", acc, x); err != nil {
					return Value{}, err
				}
			}
			return acc, nil
		},
		"title": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			// "".join(item[0].upper() + item[1:].lower() for item in
			// re.split(r"([-\s({\[<]+)", s) if item)
			var b strings.Builder
			str := s.v.(string)
			start := 0
			emit := func(item string) {
				if item == "" {
					return
				}
				r, n := utf8.DecodeRuneInString(item)
				b.WriteString(pyUpper(string(r)))
				b.WriteString(pyLower(item[n:]))
			}
			for i := 0; i < len(str); {
				r, n := utf8.DecodeRuneInString(str[i:])
				if isTitleSep(r) {
					emit(str[start:i])
					j := i
					for j < len(str) {
						r2, n2 := utf8.DecodeRuneInString(str[j:])
						if !isTitleSep(r2) {
							break
						}
						j += n2
					}
					emit(str[i:j])
					start, i = j, j
					continue
				}
				i += n
			}
			emit(str[start:])
			return NewString(b.String()), nil
		},
		"tojson": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("tojson", args, kw, []string{"ensure_ascii", "indent", "separators", "sort_keys"}, NewBool(false), None(), None(), NewBool(false))
			if err != nil {
				return Value{}, err
			}
			s, err := e.jsonDumps(v, a[0].IsTruthy(), a[1], a[2], a[3].IsTruthy())
			return NewString(s), err
		},
		"trim": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.softStr(v)
			if err != nil {
				return Value{}, err
			}
			c, err := optChars("strip", args, kw)
			return Value{kind: KindString, safe: s.safe, v: pyStrip(s.v.(string), c, true, true)}, err
		},
		"truncate": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_truncate", args, kw, []string{"length", "killwords", "end", "leeway"}, NewInt(255), NewBool(false), NewString("..."), None())
			if err != nil {
				return Value{}, err
			}
			if v.kind != KindString {
				if v.kind == KindUndefined {
					return Value{}, undefinedError(v)
				}
				return Value{}, errorf("TypeError", "object of type %s has no len()", pyReprString(typeName(v)))
			}
			length, err := intArg("truncate", a[0])
			if err != nil {
				return Value{}, err
			}
			end, err := strArg("truncate", a[2])
			if err != nil {
				return Value{}, err
			}
			leeway := int64(5)
			if a[3].kind != KindNone {
				if leeway, err = intArg("truncate", a[3]); err != nil {
					return Value{}, err
				}
			}
			endLen := int64(utf8.RuneCountInString(end))
			if length < endLen {
				return Value{}, errorf("AssertionError", "expected length >= %d, got %d", endLen, length)
			}
			if leeway < 0 {
				return Value{}, errorf("AssertionError", "expected leeway >= 0, got %d", leeway)
			}
			r := []rune(v.v.(string))
			if int64(len(r)) <= length+leeway {
				return v, nil
			}
			head := string(r[:length-endLen])
			if a[1].IsTruthy() {
				return NewString(head + end), nil
			}
			if i := strings.LastIndex(head, " "); i >= 0 {
				head = head[:i]
			}
			return NewString(head + end), nil
		},
		"unique": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("do_unique", args, kw, []string{"case_sensitive", "attribute"}, NewBool(false), None())
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(v)
			if err != nil {
				return Value{}, err
			}
			key := e.attrGetter(a[1], !a[0].IsTruthy(), None())
			var seen []Value
			var out []Value
			for _, item := range items {
				k, err := key(item)
				if err != nil {
					return Value{}, err
				}
				if k.kind == KindDict || (k.kind == KindList && !k.v.(*List).Tuple) {
					return Value{}, errorf("TypeError", "unhashable type: %s", pyReprString(typeName(k)))
				}
				dup := false
				for _, s := range seen {
					if err := e.step(1); err != nil {
						return Value{}, err
					}
					if eq, err := e.equal(s, k, 0); err != nil {
						return Value{}, err
					} else if eq {
						dup = true
						break
					}
				}
				if !dup {
					seen = append(seen, k)
					out = append(out, item)
				}
			}
			return newGenerator(out), nil
		},
		"wordcount": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.str(v)
			return NewInt(int64(len(wordRe.FindAllStringIndex(s, -1)))), err
		},
	}
	for name, f := range moreFilters {
		filters[name] = f
	}
	filters["count"] = filters["length"]
	filters["d"] = filters["default"]
	filters["e"] = filters["escape"]

	num := func(v Value) bool { return isNumeric(v) }
	cmp := func(op string) testFunc {
		return func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			a, err := argSpec(op, args, kw, []string{"b"})
			if err != nil {
				return false, err
			}
			return e.compareOp(op, v, a[0])
		}
	}
	modTest := func(name string, mod Value, want int64) testFunc {
		return func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			m := mod
			if name == "divisibleby" {
				a, err := argSpec("test_divisibleby", args, kw, []string{"num"})
				if err != nil {
					return false, err
				}
				m = a[0]
			}
			r, err := e.binOp("%", v, m)
			if err != nil {
				return false, err
			}
			return e.equal(r, NewInt(want), 0)
		}
	}
	simple := func(f func(Value) bool) testFunc {
		return func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) { return f(v), nil }
	}
	tests = map[string]testFunc{
		"odd":         modTest("odd", NewInt(2), 1),
		"even":        modTest("even", NewInt(2), 0),
		"divisibleby": modTest("divisibleby", Value{}, 0),
		"defined":     simple(func(v Value) bool { return v.kind != KindUndefined }),
		"undefined":   simple(func(v Value) bool { return v.kind == KindUndefined }),
		"none":        simple(func(v Value) bool { return v.kind == KindNone }),
		"boolean":     simple(func(v Value) bool { return v.kind == KindBool }),
		"false":       simple(func(v Value) bool { return v.kind == KindBool && !v.v.(bool) }),
		"true":        simple(func(v Value) bool { return v.kind == KindBool && v.v.(bool) }),
		"integer":     simple(func(v Value) bool { return v.kind == KindInt }),
		"float":       simple(func(v Value) bool { return v.kind == KindFloat }),
		"number":      simple(num),
		"string":      simple(func(v Value) bool { return v.kind == KindString }),
		"mapping":     simple(func(v Value) bool { return v.kind == KindDict }),
		"sequence": simple(func(v Value) bool {
			if v.kind == KindList {
				l := v.v.(*List)
				return !l.gen && l.view == ""
			}
			return v.kind == KindString || v.kind == KindDict
		}),
		"iterable": simple(func(v Value) bool {
			return v.kind == KindList || v.kind == KindDict || v.kind == KindString || v.kind == KindUndefined
		}),
		"callable": simple(func(v Value) bool {
			if v.kind == KindObject {
				return v.v.(*Object).call != nil
			}
			return v.kind == KindCallable || v.kind == KindUndefined
		}),
		"escaped": simple(func(v Value) bool { return v.IsSafe() }),
		"lower": func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			s, err := e.str(v)
			return pyIsLower(s), err
		},
		"upper": func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			s, err := e.str(v)
			return pyIsUpper(s), err
		},
		"sameas": func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			a, err := argSpec("test_sameas", args, kw, []string{"other"})
			if err != nil {
				return false, err
			}
			o := a[0]
			if v.kind != o.kind {
				return false, nil
			}
			switch v.kind {
			case KindNone, KindUndefined:
				return v.kind == KindNone, nil
			case KindBool:
				return v.v.(bool) == o.v.(bool), nil
			case KindInt:
				n := v.v.(int64)
				return n == o.v.(int64) && n >= -5 && n <= 256, nil
			case KindList:
				return v.v.(*List) == o.v.(*List), nil
			case KindDict:
				return v.v.(*Dict) == o.v.(*Dict), nil
			case KindObject:
				return v.v.(*Object) == o.v.(*Object), nil
			}
			return false, nil
		},
		"in": func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			a, err := argSpec("test_in", args, kw, []string{"seq"})
			if err != nil {
				return false, err
			}
			return e.contains(a[0], v)
		},
		"filter": func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			if v.kind != KindString {
				return false, nil
			}
			_, ok := filters[v.v.(string)]
			return ok, nil
		},
		"test": func(e *evaluator, v Value, args []Value, kw kwargs) (bool, error) {
			if v.kind != KindString {
				return false, nil
			}
			_, ok := tests[v.v.(string)]
			return ok, nil
		},
		"==": cmp("=="), "eq": cmp("=="), "equalto": cmp("=="),
		"!=": cmp("!="), "ne": cmp("!="),
		">": cmp(">"), "gt": cmp(">"), "greaterthan": cmp(">"),
		">=": cmp(">="), "ge": cmp(">="),
		"<": cmp("<"), "lt": cmp("<"), "lessthan": cmp("<"),
		"<=": cmp("<="), "le": cmp("<="),
	}

	global := func(name string, f func(e *evaluator, args []Value, kw kwargs) (Value, error)) {
		globals[name] = Value{kind: KindCallable, v: Callable{Name: name, call: f}}
	}
	globals = map[string]Value{}
	global("range", builtinRange)
	global("dict", func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		d, err := e.dictFrom("dict", args, kw)
		return Value{kind: KindDict, v: d}, err
	})
	global("namespace", func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		d, err := e.dictFrom("Namespace", args, kw)
		if err != nil {
			return Value{}, err
		}
		return Value{kind: KindObject, v: &Object{Type: "Namespace", Attrs: d, settable: true}}, nil
	})
	global("cycler", func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		if len(args) == 0 {
			return Value{}, errorf("RuntimeError", "at least one item has to be provided")
		}
		items := append([]Value(nil), args...)
		pos := 0
		d := NewDict().AsDict()
		obj := &Object{Type: "Cycler", Attrs: d}
		d.Set("items", NewList(items))
		d.Set("current", items[0])
		d.Set("next", Value{kind: KindCallable, v: Callable{Name: "next", call: func(e *evaluator, _ []Value, _ kwargs) (Value, error) {
			v := items[pos]
			pos = (pos + 1) % len(items)
			d.Set("current", items[pos])
			return v, nil
		}}})
		d.Set("reset", Value{kind: KindCallable, v: Callable{Name: "reset", call: func(e *evaluator, _ []Value, _ kwargs) (Value, error) {
			pos = 0
			d.Set("current", items[0])
			return None(), nil
		}}})
		return Value{kind: KindObject, v: obj}, nil
	})
	global("joiner", func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("Joiner", args, kw, []string{"sep"}, NewString(", "))
		if err != nil {
			return Value{}, err
		}
		used := false
		return Value{kind: KindObject, v: &Object{Type: "Joiner", call: func(e *evaluator, _ []Value, _ kwargs) (Value, error) {
			if !used {
				used = true
				return NewString(""), nil
			}
			return a[0], nil
		}}}, nil
	})
	global("raise_exception", func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("raise_exception", args, kw, []string{"message"})
		if err != nil {
			return Value{}, err
		}
		s, err := e.str(a[0])
		if err != nil {
			return Value{}, err
		}
		return Value{}, errorf("TemplateError", "%s", s)
	})
	global("strftime_now", func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("strftime_now", args, kw, []string{"format"})
		if err != nil {
			return Value{}, err
		}
		f, err := strArg("strftime", a[0])
		if err != nil {
			return Value{}, err
		}
		return NewString(strftime(time.Now(), f)), nil
	})
}

// moreFilters are Jinja2's filters that chat templates hardly use.
var moreFilters = map[string]filterFunc{
	"random": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		var items []Value
		switch v.kind {
		case KindList, KindString:
			if v.kind == KindList && (v.v.(*List).gen || v.v.(*List).view != "") {
				return Value{}, errorf("TypeError", "%s object is not subscriptable", pyReprString(typeName(v)))
			}
			items, _ = e.iterate(v)
		case KindUndefined:
			return Value{}, undefinedError(v)
		default:
			return Value{}, errorf("TypeError", "object of type %s has no len()", pyReprString(typeName(v)))
		}
		if len(items) == 0 {
			return undefinedHint("No random item, sequence was empty."), nil
		}
		return items[rand.IntN(len(items))], nil
	},
	"pprint": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		var b strings.Builder
		err := e.repr(&b, v, 0)
		return NewString(b.String()), err
	},
	"filesizeformat": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("do_filesizeformat", args, kw, []string{"binary"}, NewBool(false))
		if err != nil {
			return Value{}, err
		}
		var n float64
		switch {
		case isNumeric(v):
			n = toFloat(v)
		case v.kind == KindString:
			f, ok := parsePyFloat(v.v.(string))
			if !ok {
				return Value{}, errorf("ValueError", "could not convert string to float: %s", pyReprString(v.v.(string)))
			}
			n = f
		default:
			return Value{}, errorf("TypeError", "float() argument must be a string or a real number, not %s", pyReprString(typeName(v)))
		}
		base := 1000.0
		prefixes := []string{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
		if a[0].IsTruthy() {
			base = 1024
			prefixes = []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}
		}
		switch {
		case n == 1:
			return NewString("1 Byte"), nil
		case n < base:
			return NewString(itoa(int64(n)) + " Bytes"), nil
		}
		unit := 0.0
		prefix := ""
		for i, p := range prefixes {
			unit, prefix = math.Pow(base, float64(i+2)), p
			if n < unit {
				break
			}
		}
		return NewString(strconv.FormatFloat(base*n/unit, 'f', 1, 64) + " " + prefix), nil
	},
	"urlencode": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		quote := func(x Value, forQS bool) (string, error) {
			s, err := e.str(x)
			if err != nil {
				return "", err
			}
			var b strings.Builder
			for _, c := range []byte(s) {
				switch {
				case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-', c == '~', c == '/' && !forQS:
					b.WriteByte(c)
				case c == ' ' && forQS:
					b.WriteByte('+')
				default:
					b.WriteString("%" + strings.ToUpper(hexDigits[c>>4:c>>4+1]+hexDigits[c&15:c&15+1]))
				}
			}
			return b.String(), nil
		}
		var pairs []Value
		switch v.kind {
		case KindString, KindNone, KindInt, KindFloat, KindBool, KindUndefined:
			s, err := quote(v, false)
			return NewString(s), err
		case KindDict:
			d := v.v.(*Dict)
			for _, k := range d.Keys {
				pairs = append(pairs, newTuple([]Value{d.keyValue(k), d.Data[k]}))
			}
		default:
			var err error
			if pairs, err = e.iterate(v); err != nil {
				return Value{}, err
			}
		}
		var parts []string
		for _, p := range pairs {
			kv, err := e.iterate(p)
			if err != nil || len(kv) != 2 {
				return Value{}, errorf("ValueError", "too many values to unpack (expected 2)")
			}
			k, err := quote(kv[0], true)
			if err != nil {
				return Value{}, err
			}
			val, err := quote(kv[1], true)
			if err != nil {
				return Value{}, err
			}
			parts = append(parts, k+"="+val)
		}
		return NewString(strings.Join(parts, "&")), nil
	},
	"xmlattr": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("do_xmlattr", args, kw, []string{"autospace"}, NewBool(true))
		if err != nil {
			return Value{}, err
		}
		if v.kind != KindDict {
			return Value{}, errorf("AttributeError", "%s object has no attribute 'items'", pyReprString(typeName(v)))
		}
		d := v.v.(*Dict)
		var items []string
		for _, k := range d.Keys {
			val := d.Data[k]
			if val.kind == KindNone || val.kind == KindUndefined {
				continue
			}
			key, err := e.str(d.keyValue(k))
			if err != nil {
				return Value{}, err
			}
			if strings.ContainsAny(key, " \t\n\r\f/>=") {
				return Value{}, errorf("ValueError", "Invalid character in attribute name: %s", pyReprString(key))
			}
			ev, err := e.escape(val)
			if err != nil {
				return Value{}, err
			}
			items = append(items, escapeString(key)+`="`+ev.v.(string)+`"`)
		}
		rv := strings.Join(items, " ")
		if a[0].IsTruthy() && rv != "" {
			rv = " " + rv
		}
		return NewString(rv), nil
	},
	"urlize": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		return Value{}, errorf("TemplateRuntimeError", "the urlize filter is not implemented here")
	},
	"wordwrap": func(e *evaluator, v Value, args []Value, kw kwargs) (Value, error) {
		return Value{}, errorf("TemplateRuntimeError", "the wordwrap filter is not implemented here")
	},
}

var (
	commentRe = regexp.MustCompile(`(?s)<!--.*?-->`)
	tagRe     = regexp.MustCompile(`(?s)<.*?>`)
)

func isTitleSep(r rune) bool {
	return r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || pyIsSpace(r)
}

// dictFrom is dict(mapping_or_pairs, **kwargs).
func (e *evaluator) dictFrom(name string, args []Value, kw kwargs) (*Dict, error) {
	d := NewDict().AsDict()
	if len(args) > 1 {
		return nil, errorf("TypeError", "%s expected at most 1 argument, got %d", name, len(args))
	}
	if len(args) == 1 {
		a := args[0]
		if a.kind == KindDict {
			src := a.v.(*Dict)
			for _, k := range src.Keys {
				if err := d.setKey(src.keyValue(k), src.Data[k]); err != nil {
					return nil, err
				}
			}
		} else {
			items, err := e.iterate(a)
			if err != nil {
				return nil, err
			}
			for i, it := range items {
				pair, err := e.iterate(it)
				if err != nil || len(pair) != 2 {
					return nil, errorf("ValueError", "dictionary update sequence element #%d has length %d; 2 is required", i, len(pair))
				}
				if err := d.setKey(pair[0], pair[1]); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, p := range kw {
		d.Set(p.name, p.value)
	}
	return d, nil
}

// builtinRange is the sandbox's safe_range: Python's range, refusing more
// than 100000 items ("Range too big").
func builtinRange(e *evaluator, args []Value, kw kwargs) (Value, error) {
	if len(kw) > 0 {
		return Value{}, errorf("TypeError", "range() takes no keyword arguments")
	}
	var n [3]int64
	for i, a := range args {
		if i >= 3 {
			break
		}
		if !isIntLike(a) {
			if a.kind == KindUndefined {
				return Value{}, errorf("TypeError", "'Undefined' object cannot be interpreted as an integer")
			}
			return Value{}, errorf("TypeError", "%s object cannot be interpreted as an integer", pyReprString(typeName(a)))
		}
		n[i] = toInt(a)
	}
	var start, stop, step int64
	switch len(args) {
	case 1:
		start, stop, step = 0, n[0], 1
	case 2:
		start, stop, step = n[0], n[1], 1
	case 3:
		start, stop, step = n[0], n[1], n[2]
	default:
		return Value{}, errorf("TypeError", "range expected at most 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return Value{}, errorf("ValueError", "range() arg 3 must not be zero")
	}
	var length int64
	if step > 0 && start < stop {
		length = (stop-start-1)/step + 1
		if stop-start < 0 { // overflow
			length = math.MaxInt64
		}
	} else if step < 0 && start > stop {
		length = (start-stop-1)/(-step) + 1
		if start-stop < 0 {
			length = math.MaxInt64
		}
	}
	const maxRange = 100000
	if length > maxRange {
		return Value{}, errorf("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	if err := e.items(int(length)); err != nil {
		return Value{}, err
	}
	items := make([]Value, length)
	for i := range items {
		items[i] = NewInt(start + int64(i)*step)
	}
	r := "range(" + itoa(start) + ", " + itoa(stop)
	if step != 1 {
		r += ", " + itoa(step)
	}
	return Value{kind: KindList, v: &List{Items: items, rng: r + ")"}}, nil
}

// parsePyInt is int(s, base) for a string.
func parsePyInt(s string, base int64) (int64, bool) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if base == 0 || base == 16 || base == 8 || base == 2 {
		l := strings.ToLower(s)
		switch {
		case strings.HasPrefix(l, "0x") && (base == 0 || base == 16):
			s, base = s[2:], 16
		case strings.HasPrefix(l, "0o") && (base == 0 || base == 8):
			s, base = s[2:], 8
		case strings.HasPrefix(l, "0b") && (base == 0 || base == 2):
			s, base = s[2:], 2
		case base == 0:
			base = 10
		}
	}
	if s == "" || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), int(base), 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// parsePyFloat is float(s) for a string.
func parsePyFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	l := strings.ToLower(strings.TrimLeft(s, "+-"))
	switch l {
	case "inf", "infinity", "nan":
		f, _ := strconv.ParseFloat(s, 64)
		return f, true
	}
	if s == "" || strings.ContainsAny(l, "xp") || strings.HasPrefix(l, "_") || strings.HasSuffix(l, "_") || strings.Contains(l, "__") {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}

// pyRound is Python's round(x, n) for a float: correctly rounded, halves
// to even.
func pyRound(x float64, n int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	if n >= 0 {
		if n > 300 {
			return x
		}
		f, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', n, 64), 64)
		return f
	}
	p := math.Pow(10, float64(-n))
	return math.RoundToEven(x/p) * p
}

var (
	weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months   = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime is Python's (C library's) strftime in the C locale, for a naive
// local datetime.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		noPad := false
		if f[i] == '-' && i+1 < len(f) {
			noPad = true
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if !noPad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch f[i] {
		case 'a':
			b.WriteString(weekdays[t.Weekday()][:3])
		case 'A':
			b.WriteString(weekdays[t.Weekday()])
		case 'w':
			num(int(t.Weekday()), 1)
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			num(wd, 1)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if len(s) < 2 && !noPad {
				s = " " + s
			}
			b.WriteString(s)
		case 'b', 'h':
			b.WriteString(months[t.Month()-1][:3])
		case 'B':
			b.WriteString(months[t.Month()-1])
		case 'm':
			num(int(t.Month()), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			num(t.Year(), 1)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'j':
			num(t.YearDay(), 3)
		case 'z', 'Z':
		case 'D':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'F':
			b.WriteString(strftime(t, "%Y-%m-%d"))
		case 'T':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'R':
			b.WriteString(strftime(t, "%H:%M"))
		case 'c':
			b.WriteString(strftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'x':
			b.WriteString(strftime(t, "%m/%d/%y"))
		case 'X':
			b.WriteString(strftime(t, "%H:%M:%S"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// =============================================================================
// tojson: Python's json.dumps, as transformers' tojson filter calls it
// =============================================================================

func (e *evaluator) jsonDumps(v Value, ensureASCII bool, indent, separators Value, sortKeys bool) (string, error) {
	var ind *string
	switch indent.kind {
	case KindNone:
	case KindString:
		s := indent.v.(string)
		ind = &s
	case KindInt, KindBool:
		n := toInt(indent)
		if n > 1024 {
			return "", limitError("tojson: indent %d is more than 1024", n)
		}
		s := strings.Repeat(" ", int(max(n, 0)))
		ind = &s
	default:
		return "", errorf("TypeError", "can't multiply sequence by non-int of type %s", pyReprString(typeName(indent)))
	}
	itemSep, keySep := ", ", ": "
	if ind != nil {
		itemSep = ","
	}
	if separators.kind != KindNone {
		items, err := e.iterate(separators)
		if err != nil || len(items) != 2 || items[0].kind != KindString || items[1].kind != KindString {
			return "", errorf("ValueError", "separators must be a pair of strings")
		}
		itemSep, keySep = items[0].v.(string), items[1].v.(string)
	}
	j := &jsonEnc{e: e, ascii: ensureASCII, indent: ind, itemSep: itemSep, keySep: keySep, sortKeys: sortKeys}
	if err := j.encode(v, 0); err != nil {
		return "", err
	}
	return j.b.String(), nil
}

type jsonEnc struct {
	e               *evaluator
	b               strings.Builder
	ascii           bool
	indent          *string
	itemSep, keySep string
	sortKeys        bool
	stack           []any
}

func (j *jsonEnc) newline(level int) {
	if j.indent != nil {
		j.b.WriteByte('\n')
		for range level {
			j.b.WriteString(*j.indent)
		}
	}
}

func (j *jsonEnc) encode(v Value, level int) error {
	if level > maxNesting {
		return errorf("RecursionError", "maximum recursion depth exceeded while encoding a JSON object")
	}
	if j.b.Len() > j.e.lim.MaxStringBytes {
		return limitError("the rendering builds a string of more than %d bytes (Limits.MaxStringBytes)", j.e.lim.MaxStringBytes)
	}
	if err := j.e.step(1); err != nil {
		return err
	}
	switch v.kind {
	case KindNone:
		j.b.WriteString("null")
	case KindBool:
		if v.v.(bool) {
			j.b.WriteString("true")
		} else {
			j.b.WriteString("false")
		}
	case KindInt:
		j.b.WriteString(itoa(v.v.(int64)))
	case KindFloat:
		j.b.WriteString(jsonFloat(v.v.(float64)))
	case KindString:
		j.str(v.v.(string))
	case KindList:
		l := v.v.(*List)
		if l.gen || l.view != "" || l.rng != "" {
			return errorf("TypeError", "Object of type %s is not JSON serializable", typeName(v))
		}
		if len(l.Items) == 0 {
			j.b.WriteString("[]")
			return nil
		}
		if err := j.push(l); err != nil {
			return err
		}
		j.b.WriteByte('[')
		j.newline(level + 1)
		for i, item := range l.Items {
			if i > 0 {
				j.b.WriteString(j.itemSep)
				j.newline(level + 1)
			}
			if err := j.encode(item, level+1); err != nil {
				return err
			}
		}
		j.newline(level)
		j.b.WriteByte(']')
		j.stack = j.stack[:len(j.stack)-1]
	case KindDict:
		d := v.v.(*Dict)
		if len(d.Keys) == 0 {
			j.b.WriteString("{}")
			return nil
		}
		if err := j.push(d); err != nil {
			return err
		}
		keys := d.Keys
		if j.sortKeys {
			keys = append([]string(nil), keys...)
			sortStrings(keys)
		}
		j.b.WriteByte('{')
		j.newline(level + 1)
		for i, k := range keys {
			if i > 0 {
				j.b.WriteString(j.itemSep)
				j.newline(level + 1)
			}
			kv := d.keyValue(k)
			switch kv.kind {
			case KindString:
				j.str(kv.v.(string))
			case KindInt:
				j.str(itoa(kv.v.(int64)))
			case KindFloat:
				j.str(jsonFloat(kv.v.(float64)))
			case KindBool:
				j.str(map[bool]string{true: "true", false: "false"}[kv.v.(bool)])
			case KindNone:
				j.str("null")
			default:
				return errorf("TypeError", "keys must be str, int, float, bool or None, not %s", typeName(kv))
			}
			j.b.WriteString(j.keySep)
			if err := j.encode(d.Data[k], level+1); err != nil {
				return err
			}
		}
		j.newline(level)
		j.b.WriteByte('}')
		j.stack = j.stack[:len(j.stack)-1]
	default:
		return errorf("TypeError", "Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return formatFloat(f)
}

func (j *jsonEnc) push(p any) error {
	for _, q := range j.stack {
		if q == p {
			return errorf("ValueError", "Circular reference detected")
		}
	}
	j.stack = append(j.stack, p)
	return nil
}

const hexDigits = "0123456789abcdef"

func (j *jsonEnc) str(s string) {
	b := &j.b
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (j.ascii && r >= 0x7f):
				if r > 0xffff {
					r -= 0x10000
					j.u(0xd800 | (r>>10)&0x3ff)
					j.u(0xdc00 | r&0x3ff)
				} else {
					j.u(r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func (j *jsonEnc) u(r rune) {
	j.b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		j.b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}

// sortStrings sorts as Python sorts str, by code point, which UTF-8 byte
// order preserves.
func sortStrings(s []string) { sort.Strings(s) }
