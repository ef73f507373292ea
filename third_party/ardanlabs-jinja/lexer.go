// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows Jinja2's (jinja2/lexer.py) for the default delimiters
// with trim_blocks and lstrip_blocks on, as transformers sets them:
//
//   - newlines (\r\n, \r, \n) become \n, and one trailing newline of the
//     source is dropped (keep_trailing_newline=False);
//   - "-" after an opening delimiter strips all whitespace before the tag,
//     before a closing one all whitespace after it;
//   - lstrip_blocks: the spaces and tabs between the start of a line and a
//     block or comment tag ({% or {#, not {{) are dropped, unless the tag
//     opens with "+";
//   - trim_blocks: the first newline after a block or comment tag is
//     dropped, unless it closes with "+%}";
//   - {% raw %}...{% endraw %} is data;
//   - string literals decode Python's escapes (\n, \r, \t, \xhh, \uhhhh,
//     \Uhhhhhhhh, octal, ...), as Jinja2's unicode-escape decoding does.

type tokType int

const (
	tEOF tokType = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	typ  tokType
	val  string // data, name, operator, or a string literal's value
	num  Value  // an int or float literal's value
	line int
}

func (t token) describe() string {
	switch t.typ {
	case tEOF:
		return "end of template"
	case tData:
		return "template data"
	case tVarBegin:
		return "begin of print statement"
	case tVarEnd:
		return "end of print statement"
	case tBlockBegin:
		return "begin of statement block"
	case tBlockEnd:
		return "end of statement block"
	case tString:
		return "string"
	case tInt:
		return "integer"
	case tFloat:
		return "float"
	}
	return t.val
}

func syntaxError(line int, format string, args ...any) error {
	return &Error{Kind: "TemplateSyntaxError", Msg: fmt.Sprintf(format, args...), Line: line}
}

// pyIsSpace is Python's str.isspace for one character (what \s matches in
// Python's re).
func pyIsSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}

func allSpace(s string) bool {
	for _, r := range s {
		if !pyIsSpace(r) {
			return false
		}
	}
	return true
}

// skipSpace returns the position after the whitespace at s[i:].
func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

func normalizeNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

// lex splits a template into tokens.
func lex(src string) ([]token, error) {
	src = normalizeNewlines(src)
	src = strings.TrimSuffix(src, "\n")

	var toks []token
	pos, line := 0, 1
	lineStarting := true
	emit := func(typ tokType, val string, l int) {
		toks = append(toks, token{typ: typ, val: val, line: l})
	}
	// lstrip applies OptionalLStrip: the whitespace control of a tag to
	// the data before it.
	lstrip := func(text string, sign byte, isVar bool) string {
		if sign == '-' {
			return strings.TrimRightFunc(text, pyIsSpace)
		}
		if sign != '+' && !isVar {
			l := strings.LastIndexByte(text, '\n') + 1
			if l > 0 || lineStarting {
				if rest := text[l:]; rest != "" && allSpace(rest) {
					return text[:l]
				}
			}
		}
		return text
	}

	for pos < len(src) {
		idx := tagStart(src, pos)
		if idx < 0 {
			emit(tData, src[pos:], line)
			break
		}
		kind := src[idx+1]
		j := idx + 2
		var sign byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
			j++
		}
		rawEnd := 0
		if kind == '%' {
			rawEnd = matchRaw(src, idx, "raw", false)
		}
		if text := lstrip(src[pos:idx], sign, kind == '{'); text != "" {
			emit(tData, text, line)
		}
		line += strings.Count(src[pos:idx], "\n")

		switch {
		case rawEnd > 0:
			line += strings.Count(src[idx:rawEnd], "\n")
			lineStarting = src[rawEnd-1] == '\n'
			q, end := -1, 0
			for k := rawEnd; k+1 < len(src); k++ {
				if src[k] == '{' && src[k+1] == '%' {
					if e := matchRaw(src, k, "endraw", true); e > 0 {
						q, end = k, e
						break
					}
				}
			}
			if q < 0 {
				return nil, syntaxError(line, "Missing end of raw directive")
			}
			var esign byte
			if c := src[q+2]; c == '-' || c == '+' {
				esign = c
			}
			if text := lstrip(src[rawEnd:q], esign, false); text != "" {
				emit(tData, text, line)
			}
			line += strings.Count(src[rawEnd:end], "\n")
			lineStarting = src[end-1] == '\n'
			pos = end

		case kind == '#':
			end := -1
			for k := j; k+1 < len(src); k++ {
				switch {
				case src[k] == '+' && strings.HasPrefix(src[k+1:], "#}"):
					end = k + 3
				case src[k] == '-' && strings.HasPrefix(src[k+1:], "#}"):
					end = skipSpace(src, k+3)
				case src[k] == '#' && src[k+1] == '}':
					end = k + 2
					if end < len(src) && src[end] == '\n' {
						end++
					}
				}
				if end >= 0 {
					break
				}
			}
			if end < 0 {
				return nil, syntaxError(line, "Missing end of comment tag")
			}
			line += strings.Count(src[idx:end], "\n")
			lineStarting = src[end-1] == '\n'
			pos = end

		default:
			isBlock := kind == '%'
			if isBlock {
				emit(tBlockBegin, "", line)
			} else {
				emit(tVarBegin, "", line)
			}
			lineStarting = false
			p, err := lexTag(src, j, isBlock, &toks, &line, &lineStarting)
			if err != nil {
				return nil, err
			}
			pos = p
		}
	}
	toks = append(toks, token{typ: tEOF, line: line})
	return toks, nil
}

// tagStart is the position of the next "{{", "{%" or "{#" at or after pos,
// or -1.
func tagStart(src string, pos int) int {
	for {
		i := strings.IndexByte(src[pos:], '{')
		if i < 0 {
			return -1
		}
		i += pos
		if i+1 < len(src) {
			switch src[i+1] {
			case '{', '%', '#':
				return i
			}
		}
		pos = i + 1
	}
}

// matchRaw matches, at src[i:], "{%" [-+] space* word space* and a block
// end: "-%}" and all whitespace after it, or "%}", or for endraw also
// "+%}" and "%}\n". It returns the end of the match, or 0.
func matchRaw(src string, i int, word string, isEnd bool) int {
	j := i + 2
	if j < len(src) && (src[j] == '-' || src[j] == '+') {
		j++
	}
	j = skipSpace(src, j)
	if !strings.HasPrefix(src[j:], word) {
		return 0
	}
	j = skipSpace(src, j+len(word))
	switch {
	case isEnd && strings.HasPrefix(src[j:], "+%}"):
		return j + 3
	case strings.HasPrefix(src[j:], "-%}"):
		return skipSpace(src, j+3)
	case strings.HasPrefix(src[j:], "%}"):
		j += 2
		if isEnd && j < len(src) && src[j] == '\n' {
			j++
		}
		return j
	}
	return 0
}

var twoCharOps = []string{"//", "**", "==", "!=", ">=", "<="}

const oneCharOps = "+-/*%~[](){}><=.:|,;"

// lexTag lexes the inside of a {% %} or {{ }} tag from src[p:], up to and
// including its end, and returns the position after it.
func lexTag(src string, p int, isBlock bool, toks *[]token, line *int, lineStarting *bool) (int, error) {
	var balance []byte
	emit := func(typ tokType, val string, num Value) {
		*toks = append(*toks, token{typ: typ, val: val, num: num, line: *line})
	}
	for p < len(src) {
		if len(balance) == 0 {
			end := 0
			if isBlock {
				switch {
				case strings.HasPrefix(src[p:], "+%}"):
					end = p + 3
				case strings.HasPrefix(src[p:], "-%}"):
					end = skipSpace(src, p+3)
				case strings.HasPrefix(src[p:], "%}"):
					end = p + 2
					if end < len(src) && src[end] == '\n' {
						end++
					}
				}
			} else {
				switch {
				case strings.HasPrefix(src[p:], "-}}"):
					end = skipSpace(src, p+3)
				case strings.HasPrefix(src[p:], "}}"):
					end = p + 2
				}
			}
			if end > 0 {
				if isBlock {
					emit(tBlockEnd, "", Value{})
				} else {
					emit(tVarEnd, "", Value{})
				}
				*line += strings.Count(src[p:end], "\n")
				*lineStarting = src[end-1] == '\n'
				return end, nil
			}
		}
		r, n := utf8.DecodeRuneInString(src[p:])
		if pyIsSpace(r) {
			q := skipSpace(src, p)
			*line += strings.Count(src[p:q], "\n")
			*lineStarting = src[q-1] == '\n'
			p = q
			continue
		}
		*lineStarting = false
		if q := matchFloat(src, p); q > 0 {
			f, err := strconv.ParseFloat(strings.ReplaceAll(src[p:q], "_", ""), 64)
			if err != nil {
				return 0, syntaxError(*line, "invalid float literal %q", src[p:q])
			}
			emit(tFloat, src[p:q], NewFloat(f))
			p = q
			continue
		}
		if q := matchInt(src, p); q > 0 {
			text := strings.ReplaceAll(strings.ToLower(src[p:q]), "_", "")
			base := 10
			switch {
			case strings.HasPrefix(text, "0b"):
				base, text = 2, text[2:]
			case strings.HasPrefix(text, "0o"):
				base, text = 8, text[2:]
			case strings.HasPrefix(text, "0x"):
				base, text = 16, text[2:]
			}
			n, err := strconv.ParseInt(text, base, 64)
			if err != nil {
				return 0, syntaxError(*line, "integer literal %s is too large", src[p:q])
			}
			emit(tInt, src[p:q], NewInt(n))
			p = q
			continue
		}
		if r == '_' || unicode.IsLetter(r) {
			q := p + n
			for q < len(src) {
				r2, n2 := utf8.DecodeRuneInString(src[q:])
				if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) {
					break
				}
				q += n2
			}
			emit(tName, src[p:q], Value{})
			p = q
			continue
		}
		if r == '\'' || r == '"' {
			q := p + 1
			for q < len(src) && src[q] != byte(r) {
				if src[q] == '\\' && q+1 < len(src) {
					q++
				}
				q++
			}
			if q < len(src) {
				s, err := decodeStringLiteral(src[p+1 : q])
				if err != nil {
					return 0, syntaxError(*line, "%s", err.Error())
				}
				emit(tString, s, Value{})
				*line += strings.Count(src[p:q+1], "\n")
				p = q + 1
				continue
			}
		}
		op := ""
		for _, o := range twoCharOps {
			if strings.HasPrefix(src[p:], o) {
				op = o
				break
			}
		}
		if op == "" && strings.IndexByte(oneCharOps, src[p]) >= 0 {
			op = src[p : p+1]
		}
		if op == "" {
			return 0, syntaxError(*line, "unexpected char %s at %d", pyReprString(string(r)), p)
		}
		switch op {
		case "{":
			balance = append(balance, '}')
		case "(":
			balance = append(balance, ')')
		case "[":
			balance = append(balance, ']')
		case "}", ")", "]":
			if len(balance) == 0 {
				return 0, syntaxError(*line, "unexpected '%s'", op)
			}
			want := balance[len(balance)-1]
			balance = balance[:len(balance)-1]
			if want != op[0] {
				return 0, syntaxError(*line, "unexpected '%s', expected '%c'", op, want)
			}
		}
		emit(tOp, op, Value{})
		p += len(op)
	}
	return p, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// digitsUnderscore matches (\d+_)*\d+ at s[i:] and returns its end, or -1.
func digitsUnderscore(s string, i int) int {
	if i >= len(s) || !isDigit(s[i]) {
		return -1
	}
	for {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i+1 < len(s) && s[i] == '_' && isDigit(s[i+1]) {
			i++
			continue
		}
		return i
	}
}

// matchFloat matches Jinja2's float_re at s[i:]:
// (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+).
func matchFloat(s string, i int) int {
	if i > 0 && s[i-1] == '.' {
		return 0
	}
	q := digitsUnderscore(s, i)
	if q < 0 {
		return 0
	}
	frac := 0
	if q < len(s) && s[q] == '.' {
		if f := digitsUnderscore(s, q+1); f > 0 {
			frac = f
		}
	}
	e := q
	if frac > 0 {
		e = frac
	}
	if e < len(s) && (s[e] == 'e' || s[e] == 'E') {
		k := e + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if x := digitsUnderscore(s, k); x > 0 {
			return x
		}
	}
	if frac > 0 {
		return frac
	}
	return 0
}

// matchInt matches Jinja2's integer_re at s[i:]:
// 0b(_?[0-1])+ | 0o(_?[0-7])+ | 0x(_?[\da-f])+ | [1-9](_?\d)* | 0(_?0)*.
func matchInt(s string, i int) int {
	if i >= len(s) || !isDigit(s[i]) {
		return 0
	}
	run := func(j int, ok func(byte) bool) int {
		start := j
		for j < len(s) {
			if ok(s[j]) {
				j++
				continue
			}
			if s[j] == '_' && j+1 < len(s) && ok(s[j+1]) {
				j += 2
				continue
			}
			break
		}
		if j == start {
			return -1
		}
		return j
	}
	if s[i] == '0' && i+1 < len(s) {
		var ok func(byte) bool
		switch s[i+1] {
		case 'b', 'B':
			ok = func(c byte) bool { return c == '0' || c == '1' }
		case 'o', 'O':
			ok = func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x', 'X':
			ok = func(c byte) bool {
				return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
			}
		}
		if ok != nil {
			if j := run(i+2, ok); j > 0 {
				return j
			}
		}
	}
	if s[i] == '0' {
		if j := run(i+1, func(c byte) bool { return c == '0' }); j > 0 {
			return j
		}
		return i + 1
	}
	if j := run(i+1, isDigit); j > 0 {
		return j
	}
	return i + 1
}

// decodeStringLiteral decodes a string literal's text as Jinja2 does:
// text.encode("ascii", "backslashreplace").decode("unicode-escape").
func decodeStringLiteral(s string) (string, error) {
	if !strings.ContainsRune(s, '\\') {
		return s, nil
	}
	var a strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			a.WriteByte(byte(r))
		case r < 0x100:
			fmt.Fprintf(&a, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&a, `\u%04x`, r)
		default:
			fmt.Fprintf(&a, `\U%08x`, r)
		}
	}
	t := a.String()
	var b strings.Builder
	hex := func(i, n int, what string) (rune, int, error) {
		if i+n > len(t) {
			return 0, 0, fmt.Errorf("truncated %s escape", what)
		}
		v, err := strconv.ParseUint(t[i:i+n], 16, 32)
		if err != nil || strings.ContainsAny(t[i:i+n], "+-_") {
			return 0, 0, fmt.Errorf("truncated %s escape", what)
		}
		if v > unicode.MaxRune {
			return 0, 0, fmt.Errorf("illegal Unicode character")
		}
		return rune(v), i + n, nil
	}
	for i := 0; i < len(t); {
		c := t[i]
		if c != '\\' {
			b.WriteRune(rune(c))
			i++
			continue
		}
		if i+1 >= len(t) {
			return "", fmt.Errorf("\\ at end of string")
		}
		e := t[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\':
			b.WriteByte('\\')
		case '\'':
			b.WriteByte('\'')
		case '"':
			b.WriteByte('"')
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := rune(e - '0')
			for k := 0; k < 2 && i < len(t) && t[i] >= '0' && t[i] <= '7'; k++ {
				v = v*8 + rune(t[i]-'0')
				i++
			}
			b.WriteRune(v)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			r, j, err := hex(i, n, `\`+string(e)+strings.Repeat("X", n))
			if err != nil {
				return "", err
			}
			b.WriteRune(r)
			i = j
		case 'N':
			return "", fmt.Errorf(`\N{...} escapes are not supported`)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
