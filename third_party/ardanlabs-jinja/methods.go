// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// The Python methods of strings, dicts and lists that templates call
// (message.content.strip(), tool.items(), ...). The sandbox forbids the
// methods that change a list or a dict (append, pop, update, ...): reading
// one gives an undefined value that fails when called, as Jinja2's
// ImmutableSandboxedEnvironment does.

type methodFunc func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error)

func bound(self Value, name string, fn methodFunc) Value {
	return Value{kind: KindCallable, v: Callable{
		Name: name,
		repr: "<built-in method " + name + " of " + typeName(self) + " object>",
		call: func(e *evaluator, args []Value, kw kwargs) (Value, error) {
			return fn(e, self, args, kw)
		},
	}}
}

var unsafeMethods = map[string]map[string]bool{
	"dict": {"clear": true, "pop": true, "popitem": true, "setdefault": true, "update": true},
	"list": {"append": true, "clear": true, "pop": true, "reverse": true, "insert": true, "sort": true, "extend": true, "remove": true},
}

func strMethod(self Value, name string) (Value, bool) {
	fn, ok := strMethods[name]
	if !ok {
		return Value{}, false
	}
	return bound(self, name, fn), true
}

func dictMethod(self Value, name string) (Value, bool) {
	if unsafeMethods["dict"][name] {
		return unsafeUndefined(self, name), true
	}
	fn, ok := dictMethods[name]
	if !ok {
		return Value{}, false
	}
	return bound(self, name, fn), true
}

func listMethod(self Value, name string) (Value, bool) {
	l := self.v.(*List)
	if l.gen || l.view != "" {
		return Value{}, false
	}
	if !l.Tuple && l.rng == "" && unsafeMethods["list"][name] {
		return unsafeUndefined(self, name), true
	}
	if name == "copy" && (l.Tuple || l.rng != "") {
		return Value{}, false
	}
	fn, ok := listMethods[name]
	if !ok {
		return Value{}, false
	}
	return bound(self, name, fn), true
}

// argSpec binds positional and keyword arguments to parameters, as a
// Python function's signature does; defs are the defaults of the last
// parameters.
func argSpec(fname string, args []Value, kw kwargs, params []string, defs ...Value) ([]Value, error) {
	if len(args) > len(params) {
		return nil, errorf("TypeError", "%s() takes at most %d arguments (%d given)", fname, len(params), len(args))
	}
	out := make([]Value, len(params))
	set := make([]bool, len(params))
	copy(out, args)
	for i := range args {
		set[i] = true
	}
	for _, p := range kw {
		found := false
		for i, name := range params {
			if name == p.name {
				if set[i] {
					return nil, errorf("TypeError", "%s() got multiple values for argument %s", fname, pyReprString(name))
				}
				out[i], set[i], found = p.value, true, true
				break
			}
		}
		if !found {
			return nil, errorf("TypeError", "%s() got an unexpected keyword argument %s", fname, pyReprString(p.name))
		}
	}
	first := len(params) - len(defs)
	for i := range params {
		if set[i] {
			continue
		}
		if i < first {
			return nil, errorf("TypeError", "%s() missing required argument %s", fname, pyReprString(params[i]))
		}
		out[i] = defs[i-first]
	}
	return out, nil
}

// strArg is the string of an argument that must be a string.
func strArg(fname string, v Value) (string, error) {
	if v.kind != KindString {
		if v.kind == KindUndefined {
			return "", undefinedError(v)
		}
		return "", errorf("TypeError", "%s() argument must be str, not %s", fname, typeName(v))
	}
	return v.v.(string), nil
}

func intArg(fname string, v Value) (int64, error) {
	if !isIntLike(v) {
		if v.kind == KindUndefined {
			return 0, undefinedError(v)
		}
		return 0, errorf("TypeError", "%s object cannot be interpreted as an integer", pyReprString(typeName(v)))
	}
	return toInt(v), nil
}

// optChars reads strip's optional argument: nil for whitespace.
func optChars(fname string, args []Value, kw kwargs) (*string, error) {
	a, err := argSpec(fname, args, kw, []string{"chars"}, None())
	if err != nil {
		return nil, err
	}
	if a[0].kind == KindNone {
		return nil, nil
	}
	s, err := strArg(fname, a[0])
	return &s, err
}

func pyStrip(s string, chars *string, left, right bool) string {
	in := pyIsSpace
	if chars != nil {
		set := *chars
		in = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// pySplit is str.split / str.rsplit.
func pySplit(s string, sep *string, maxsplit int, fromRight bool) []string {
	if sep == nil {
		var fields []string
		if !fromRight {
			rest := strings.TrimLeftFunc(s, pyIsSpace)
			for rest != "" {
				if maxsplit >= 0 && len(fields) == maxsplit {
					fields = append(fields, strings.TrimRightFunc(rest, pyIsSpace))
					break
				}
				i := strings.IndexFunc(rest, pyIsSpace)
				if i < 0 {
					fields = append(fields, rest)
					break
				}
				fields = append(fields, rest[:i])
				rest = strings.TrimLeftFunc(rest[i:], pyIsSpace)
			}
			return fields
		}
		rest := strings.TrimRightFunc(s, pyIsSpace)
		for rest != "" {
			if maxsplit >= 0 && len(fields) == maxsplit {
				fields = append(fields, strings.TrimLeftFunc(rest, pyIsSpace))
				break
			}
			i := strings.LastIndexFunc(rest, pyIsSpace)
			if i < 0 {
				fields = append(fields, rest)
				break
			}
			_, n := utf8.DecodeRuneInString(rest[i:])
			fields = append(fields, rest[i+n:])
			rest = strings.TrimRightFunc(rest[:i], pyIsSpace)
		}
		for i, j := 0, len(fields)-1; i < j; i, j = i+1, j-1 {
			fields[i], fields[j] = fields[j], fields[i]
		}
		return fields
	}
	if maxsplit < 0 {
		return strings.Split(s, *sep)
	}
	if !fromRight {
		return strings.SplitN(s, *sep, maxsplit+1)
	}
	var parts []string
	for len(parts) < maxsplit {
		i := strings.LastIndex(s, *sep)
		if i < 0 {
			break
		}
		parts = append(parts, s[i+len(*sep):])
		s = s[:i]
	}
	parts = append(parts, s)
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return parts
}

func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

func pySplitlines(s string, keepends bool) []string {
	var lines []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isLineBreak(r) {
			i += n
			continue
		}
		end := i + n
		if r == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		if keepends {
			lines = append(lines, s[start:end])
		} else {
			lines = append(lines, s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		lines = append(lines, s[start:])
	}
	return lines
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// Python's str.upper, lower and casefold use Unicode's full case mappings
// (ß becomes SS, ﬁ FI, a final Σ ς), which golang.org/x/text/cases applies.

func pyUpper(s string) string { return cases.Upper(language.Und).String(s) }

func pyLower(s string) string { return cases.Lower(language.Und).String(s) }

func pyCasefold(s string) string { return cases.Fold().String(s) }

func pyTitleRune(r rune) string {
	return cases.Title(language.Und, cases.NoLower).String(string(r))
}

func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if isCased(r) {
			if prevCased {
				b.WriteString(pyLower(string(r)))
			} else {
				b.WriteString(pyTitleRune(r))
			}
			prevCased = true
		} else {
			b.WriteRune(r)
			prevCased = false
		}
	}
	return b.String()
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return pyTitleRune(r) + pyLower(s[n:])
}

func pyIsLower(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsLower(r) {
			cased = true
		}
	}
	return cased
}

func pyIsUpper(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsLower(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsUpper(r) {
			cased = true
		}
	}
	return cased
}

func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

// pad is str.center, ljust and rjust.
func pad(s string, width int64, fill rune, how byte) string {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return s
	}
	marg := width - n
	f := string(fill)
	switch how {
	case 'l':
		return s + strings.Repeat(f, int(marg))
	case 'r':
		return strings.Repeat(f, int(marg)) + s
	}
	left := marg/2 + (marg & width & 1)
	return strings.Repeat(f, int(left)) + s + strings.Repeat(f, int(marg-left))
}

// runeRange is s[start:end] in characters, with Python's index rules; it
// returns the byte offset of the start.
func runeRange(s string, start, end Value) (string, int, error) {
	r := []rune(s)
	var b [3]*int64
	for i, v := range []Value{start, end} {
		switch v.kind {
		case KindNone, KindUndefined:
			if v.kind == KindUndefined && v.v != nil {
				return "", 0, undefinedError(v)
			}
		default:
			n, err := intArg("slice", v)
			if err != nil {
				return "", 0, err
			}
			b[i] = &n
		}
	}
	idx := sliceIndices(len(r), b)
	if len(idx) == 0 {
		st := 0
		if b[0] != nil {
			st = int(*b[0])
			if st < 0 {
				st += len(r)
			}
			st = max(0, min(st, len(r)))
		}
		return "", len(string(r[:st])), nil
	}
	return string(r[idx[0] : idx[len(idx)-1]+1]), len(string(r[:idx[0]])), nil
}

func findArgs(fname string, s string, args []Value, kw kwargs) (sub string, hay string, off int, err error) {
	a, err := argSpec(fname, args, kw, []string{"sub", "start", "end"}, None(), None())
	if err != nil {
		return "", "", 0, err
	}
	if sub, err = strArg(fname, a[0]); err != nil {
		return "", "", 0, err
	}
	hay, off, err = runeRange(s, a[1], a[2])
	return sub, hay, off, err
}

func runeIndex(s string, byteOff int) int64 { return int64(utf8.RuneCountInString(s[:byteOff])) }

func strList(items []string, safe bool) Value {
	vals := make([]Value, len(items))
	for i, s := range items {
		vals[i] = Value{kind: KindString, safe: safe, v: s}
	}
	return NewList(vals)
}

// markupArg escapes a string argument of a Markup method.
func markupArg(self Value, s string) string {
	if self.safe {
		return escapeString(s)
	}
	return s
}

var strMethods map[string]methodFunc

func init() {
	str := func(v Value) string { return v.v.(string) }
	same := func(self Value, s string) Value { return Value{kind: KindString, safe: self.safe, v: s} }
	noArgs := func(name string, f func(string) Value) methodFunc {
		return func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			if _, err := argSpec(name, args, kw, nil); err != nil {
				return Value{}, err
			}
			return f(str(self)), nil
		}
	}
	strMethods = map[string]methodFunc{
		"strip": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			c, err := optChars("strip", args, kw)
			return same(self, pyStrip(str(self), c, true, true)), err
		},
		"lstrip": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			c, err := optChars("lstrip", args, kw)
			return same(self, pyStrip(str(self), c, true, false)), err
		},
		"rstrip": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			c, err := optChars("rstrip", args, kw)
			return same(self, pyStrip(str(self), c, false, true)), err
		},
		"split": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return splitMethod(e, self, args, kw, false)
		},
		"rsplit": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return splitMethod(e, self, args, kw, true)
		},
		"splitlines": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("splitlines", args, kw, []string{"keepends"}, NewBool(false))
			if err != nil {
				return Value{}, err
			}
			return strList(pySplitlines(str(self), a[0].IsTruthy()), self.safe), nil
		},
		"startswith": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return affix(self, args, kw, "startswith", strings.HasPrefix)
		},
		"endswith": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return affix(self, args, kw, "endswith", strings.HasSuffix)
		},
		"replace": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("replace", args, kw, []string{"old", "new", "count"}, NewInt(-1))
			if err != nil {
				return Value{}, err
			}
			old, err := strArg("replace", a[0])
			if err != nil {
				return Value{}, err
			}
			nw, err := strArg("replace", a[1])
			if err != nil {
				return Value{}, err
			}
			n, err := intArg("replace", a[2])
			if err != nil {
				return Value{}, err
			}
			s := str(self)
			old, nw = markupArg(self, old), markupArg(self, nw)
			if c := strings.Count(s, old); c > 0 && len(nw) > len(old) {
				if err := e.grow(len(s) + c*(len(nw)-len(old))); err != nil {
					return Value{}, err
				}
			}
			return same(self, strings.Replace(s, old, nw, int(n))), nil
		},
		"upper":      noArgs("upper", func(s string) Value { return NewString(pyUpper(s)) }),
		"lower":      noArgs("lower", func(s string) Value { return NewString(pyLower(s)) }),
		"casefold":   noArgs("casefold", func(s string) Value { return NewString(pyCasefold(s)) }),
		"title":      noArgs("title", func(s string) Value { return NewString(pyTitle(s)) }),
		"capitalize": noArgs("capitalize", func(s string) Value { return NewString(pyCapitalize(s)) }),
		"swapcase": noArgs("swapcase", func(s string) Value {
			return NewString(strings.Map(func(r rune) rune {
				if unicode.IsUpper(r) {
					return unicode.ToLower(r)
				}
				return unicode.ToUpper(r)
			}, s))
		}),
		"isdigit":   noArgs("isdigit", func(s string) Value { return NewBool(allRunes(s, unicode.IsDigit)) }),
		"isdecimal": noArgs("isdecimal", func(s string) Value { return NewBool(allRunes(s, unicode.IsDigit)) }),
		"isnumeric": noArgs("isnumeric", func(s string) Value { return NewBool(allRunes(s, unicode.IsNumber)) }),
		"isalpha":   noArgs("isalpha", func(s string) Value { return NewBool(allRunes(s, unicode.IsLetter)) }),
		"isalnum": noArgs("isalnum", func(s string) Value {
			return NewBool(allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }))
		}),
		"isspace": noArgs("isspace", func(s string) Value { return NewBool(allRunes(s, pyIsSpace)) }),
		"islower": noArgs("islower", func(s string) Value { return NewBool(pyIsLower(s)) }),
		"isupper": noArgs("isupper", func(s string) Value { return NewBool(pyIsUpper(s)) }),
		"isascii": noArgs("isascii", func(s string) Value {
			for i := 0; i < len(s); i++ {
				if s[i] >= 0x80 {
					return NewBool(false)
				}
			}
			return NewBool(true)
		}),
		"istitle": noArgs("istitle", func(s string) Value { return NewBool(s != "" && pyTitle(s) == s && strings.IndexFunc(s, isCased) >= 0) }),
		"isidentifier": noArgs("isidentifier", func(s string) Value {
			for i, r := range s {
				if !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
					return NewBool(false)
				}
			}
			return NewBool(s != "")
		}),
		"isprintable": noArgs("isprintable", func(s string) Value {
			for _, r := range s {
				if !unicode.IsPrint(r) {
					return NewBool(false)
				}
			}
			return NewBool(true)
		}),
		"count": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			sub, hay, _, err := findArgs("count", str(self), args, kw)
			if err != nil {
				return Value{}, err
			}
			if sub == "" {
				return NewInt(int64(utf8.RuneCountInString(hay)) + 1), nil
			}
			return NewInt(int64(strings.Count(hay, sub))), nil
		},
		"find": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return findMethod(self, args, kw, "find", false, false)
		},
		"rfind": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return findMethod(self, args, kw, "rfind", true, false)
		},
		"index": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return findMethod(self, args, kw, "index", false, true)
		},
		"rindex": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return findMethod(self, args, kw, "rindex", true, true)
		},
		"join": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("join", args, kw, []string{"iterable"})
			if err != nil {
				return Value{}, err
			}
			items, err := e.iterate(a[0])
			if err != nil {
				return Value{}, errorf("TypeError", "can only join an iterable")
			}
			parts := make([]string, len(items))
			total := 0
			for i, it := range items {
				if it.kind != KindString {
					return Value{}, errorf("TypeError", "sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = it.v.(string)
				if self.safe && !it.safe {
					parts[i] = escapeString(parts[i])
				}
				total += len(parts[i]) + len(str(self))
			}
			if err := e.grow(total); err != nil {
				return Value{}, err
			}
			return same(self, strings.Join(parts, str(self))), nil
		},
		"center": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return padMethod(e, self, args, kw, "center", 'c')
		},
		"ljust": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return padMethod(e, self, args, kw, "ljust", 'l')
		},
		"rjust": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return padMethod(e, self, args, kw, "rjust", 'r')
		},
		"zfill": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("zfill", args, kw, []string{"width"})
			if err != nil {
				return Value{}, err
			}
			w, err := intArg("zfill", a[0])
			if err != nil {
				return Value{}, err
			}
			if err := e.grow(int(min(w, int64(e.lim.MaxStringBytes)+1))); err != nil {
				return Value{}, err
			}
			s := str(self)
			sign := ""
			if s != "" && (s[0] == '+' || s[0] == '-') {
				sign, s = s[:1], s[1:]
			}
			n := w - int64(utf8.RuneCountInString(s)) - int64(len(sign))
			if n > 0 {
				s = strings.Repeat("0", int(n)) + s
			}
			return same(self, sign+s), nil
		},
		"partition": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return partition(self, args, kw, "partition", false)
		},
		"rpartition": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			return partition(self, args, kw, "rpartition", true)
		},
		"removeprefix": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("removeprefix", args, kw, []string{"prefix"})
			if err != nil {
				return Value{}, err
			}
			p, err := strArg("removeprefix", a[0])
			return same(self, strings.TrimPrefix(str(self), p)), err
		},
		"removesuffix": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			a, err := argSpec("removesuffix", args, kw, []string{"suffix"})
			if err != nil {
				return Value{}, err
			}
			p, err := strArg("removesuffix", a[0])
			return same(self, strings.TrimSuffix(str(self), p)), err
		},
		"format": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			s, err := e.strFormat(str(self), args, kw, self.safe)
			return same(self, s), err
		},
		"format_map": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			if len(kw) > 0 {
				return Value{}, errorf("TypeError", "format_map() takes no keyword arguments")
			}
			if len(args) != 1 || args[0].kind != KindDict {
				return Value{}, errorf("TypeError", "format_map() takes exactly one argument (%d given)", len(args))
			}
			d := args[0].v.(*Dict)
			var m kwargs
			for _, k := range d.Keys {
				m = append(m, kwPair{k, d.Data[k]})
			}
			s, err := e.strFormat(str(self), nil, m, self.safe)
			return same(self, s), err
		},
	}
	for _, name := range []string{"upper", "lower", "casefold", "title", "capitalize", "swapcase"} {
		f := strMethods[name]
		strMethods[name] = func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
			v, err := f(e, self, args, kw)
			v.safe = self.safe
			return v, err
		}
	}
}

func splitMethod(e *evaluator, self Value, args []Value, kw kwargs, fromRight bool) (Value, error) {
	name := "split"
	if fromRight {
		name = "rsplit"
	}
	a, err := argSpec(name, args, kw, []string{"sep", "maxsplit"}, None(), NewInt(-1))
	if err != nil {
		return Value{}, err
	}
	var sep *string
	if a[0].kind != KindNone {
		s, err := strArg(name, a[0])
		if err != nil {
			return Value{}, err
		}
		if s == "" {
			return Value{}, errorf("ValueError", "empty separator")
		}
		sep = &s
	}
	n, err := intArg(name, a[1])
	if err != nil {
		return Value{}, err
	}
	parts := pySplit(self.v.(string), sep, int(n), fromRight)
	if err := e.items(len(parts)); err != nil {
		return Value{}, err
	}
	return strList(parts, self.safe), nil
}

func affix(self Value, args []Value, kw kwargs, name string, test func(string, string) bool) (Value, error) {
	a, err := argSpec(name, args, kw, []string{"prefix", "start", "end"}, None(), None())
	if err != nil {
		return Value{}, err
	}
	hay, _, err := runeRange(self.v.(string), a[1], a[2])
	if err != nil {
		return Value{}, err
	}
	var cands []Value
	switch {
	case a[0].kind == KindString:
		cands = []Value{a[0]}
	case a[0].kind == KindList && a[0].v.(*List).Tuple:
		cands = a[0].v.(*List).Items
	default:
		return Value{}, errorf("TypeError", "%s first arg must be str or a tuple of str, not %s", name, typeName(a[0]))
	}
	for _, c := range cands {
		if c.kind != KindString {
			return Value{}, errorf("TypeError", "tuple for %s must only contain str, not %s", name, typeName(c))
		}
		if test(hay, c.v.(string)) {
			return NewBool(true), nil
		}
	}
	return NewBool(false), nil
}

func findMethod(self Value, args []Value, kw kwargs, name string, last, raise bool) (Value, error) {
	s := self.v.(string)
	sub, hay, off, err := findArgs(name, s, args, kw)
	if err != nil {
		return Value{}, err
	}
	var i int
	if last {
		i = strings.LastIndex(hay, sub)
	} else {
		i = strings.Index(hay, sub)
	}
	if i < 0 {
		if raise {
			return Value{}, errorf("ValueError", "substring not found")
		}
		return NewInt(-1), nil
	}
	return NewInt(runeIndex(s, off+i)), nil
}

func padMethod(e *evaluator, self Value, args []Value, kw kwargs, name string, how byte) (Value, error) {
	a, err := argSpec(name, args, kw, []string{"width", "fillchar"}, NewString(" "))
	if err != nil {
		return Value{}, err
	}
	w, err := intArg(name, a[0])
	if err != nil {
		return Value{}, err
	}
	f, err := strArg(name, a[1])
	if err != nil {
		return Value{}, err
	}
	if utf8.RuneCountInString(f) != 1 {
		return Value{}, errorf("TypeError", "The fill character must be exactly one character long")
	}
	if err := e.grow(int(min(w*int64(len(f)), int64(e.lim.MaxStringBytes)+1))); err != nil {
		return Value{}, err
	}
	r, _ := utf8.DecodeRuneInString(f)
	return Value{kind: KindString, safe: self.safe, v: pad(self.v.(string), w, r, how)}, nil
}

func partition(self Value, args []Value, kw kwargs, name string, last bool) (Value, error) {
	a, err := argSpec(name, args, kw, []string{"sep"})
	if err != nil {
		return Value{}, err
	}
	sep, err := strArg(name, a[0])
	if err != nil {
		return Value{}, err
	}
	if sep == "" {
		return Value{}, errorf("ValueError", "empty separator")
	}
	s := self.v.(string)
	mk := func(x, y, z string) Value {
		return newTuple([]Value{
			{kind: KindString, safe: self.safe, v: x},
			{kind: KindString, safe: self.safe, v: y},
			{kind: KindString, safe: self.safe, v: z},
		})
	}
	var i int
	if last {
		i = strings.LastIndex(s, sep)
	} else {
		i = strings.Index(s, sep)
	}
	if i < 0 {
		if last {
			return mk("", "", s), nil
		}
		return mk(s, "", ""), nil
	}
	return mk(s[:i], sep, s[i+len(sep):]), nil
}

var dictMethods = map[string]methodFunc{
	"get": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		if len(kw) > 0 {
			return Value{}, errorf("TypeError", "dict.get() takes no keyword arguments")
		}
		if len(args) < 1 || len(args) > 2 {
			return Value{}, errorf("TypeError", "get expected 1 or 2 arguments, got %d", len(args))
		}
		def := None()
		if len(args) == 2 {
			def = args[1]
		}
		ks, err := hashKey(args[0])
		if err != nil {
			return Value{}, err
		}
		if v, ok := self.v.(*Dict).Get(ks); ok {
			return v, nil
		}
		return def, nil
	},
	"items": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		if _, err := argSpec("items", args, kw, nil); err != nil {
			return Value{}, err
		}
		d := self.v.(*Dict)
		items := make([]Value, len(d.Keys))
		for i, k := range d.Keys {
			items[i] = newTuple([]Value{d.keyValue(k), d.Data[k]})
		}
		return Value{kind: KindList, v: &List{Items: items, view: "dict_items"}}, nil
	},
	"keys": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		if _, err := argSpec("keys", args, kw, nil); err != nil {
			return Value{}, err
		}
		d := self.v.(*Dict)
		items := make([]Value, len(d.Keys))
		for i, k := range d.Keys {
			items[i] = d.keyValue(k)
		}
		return Value{kind: KindList, v: &List{Items: items, view: "dict_keys"}}, nil
	},
	"values": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		if _, err := argSpec("values", args, kw, nil); err != nil {
			return Value{}, err
		}
		d := self.v.(*Dict)
		items := make([]Value, len(d.Keys))
		for i, k := range d.Keys {
			items[i] = d.Data[k]
		}
		return Value{kind: KindList, v: &List{Items: items, view: "dict_values"}}, nil
	},
	"copy": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		if _, err := argSpec("copy", args, kw, nil); err != nil {
			return Value{}, err
		}
		return Value{kind: KindDict, v: self.v.(*Dict).clone()}, nil
	},
}

var listMethods = map[string]methodFunc{
	"count": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("count", args, kw, []string{"value"})
		if err != nil {
			return Value{}, err
		}
		n := 0
		for _, x := range self.v.(*List).Items {
			eq, err := e.equal(x, a[0], 0)
			if err != nil {
				return Value{}, err
			}
			if eq {
				n++
			}
		}
		return NewInt(int64(n)), nil
	},
	"index": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		a, err := argSpec("index", args, kw, []string{"value"})
		if err != nil {
			return Value{}, err
		}
		for i, x := range self.v.(*List).Items {
			eq, err := e.equal(x, a[0], 0)
			if err != nil {
				return Value{}, err
			}
			if eq {
				return NewInt(int64(i)), nil
			}
		}
		s, _ := reprValue(a[0], 0)
		return Value{}, errorf("ValueError", "%s is not in list", s)
	},
	"copy": func(e *evaluator, self Value, args []Value, kw kwargs) (Value, error) {
		if _, err := argSpec("copy", args, kw, nil); err != nil {
			return Value{}, err
		}
		return NewList(append([]Value(nil), self.v.(*List).Items...)), nil
	},
}
