package tasks

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Math answer verification: ExtractAnswer finds the final answer of a
// worked solution and MathEqual compares two answers the way graders of
// GSM8K- and MATH-style datasets do (numbers by value, expressions after a
// light LaTeX normalisation). It is deliberately a normaliser, not a
// computer-algebra system: "2x+2" and "2(x+1)" differ.

// ExtractAnswer returns the final answer of a solution text, looked for in
// this order:
//
//  1. the content of the last <answer>…</answer> (the think/answer
//     template), searched further by the rules below;
//  2. the argument of the last \boxed{…} or \fbox{…}, braces balanced (so
//     \boxed{\frac{1}{2}} yields \frac{1}{2});
//  3. the rest of the line after the last GSM8K marker "####";
//  4. the last number in the text (thousands separators, a sign, decimals,
//     a fraction a/b, an exponent).
//
// It returns false when none applies.
func ExtractAnswer(text string) (string, bool) {
	text = strings.ReplaceAll(text, "\u2212", "-")
	if inner, ok := lastTagged(text, "<answer>", "</answer>"); ok {
		text = inner
		if s, ok := extractMarked(text); ok {
			return s, true
		}
		// A block without words is the answer itself ("x = 3/4",
		// "(1, 2)"); in a sentence the answer is its last number.
		t := strings.TrimSpace(text)
		if t != "" && !proseRE.MatchString(t) {
			return t, true
		}
		if m := lastNumberRE.FindAllString(t, -1); len(m) > 0 {
			return m[len(m)-1], true
		}
		if t != "" {
			return t, true
		}
	}
	if s, ok := extractMarked(text); ok {
		return s, true
	}
	if m := lastNumberRE.FindAllString(text, -1); len(m) > 0 {
		return m[len(m)-1], true
	}
	return "", false
}

// extractMarked applies rules 2 and 3 of ExtractAnswer.
func extractMarked(text string) (string, bool) {
	if s, ok := lastBoxed(text); ok {
		return s, true
	}
	if i := strings.LastIndex(text, "####"); i >= 0 {
		rest := text[i+4:]
		if j := strings.IndexByte(rest, '\n'); j >= 0 {
			rest = rest[:j]
		}
		if s := strings.TrimSpace(rest); s != "" {
			return s, true
		}
	}
	return "", false
}

// lastTagged returns the content of the last open…close pair.
func lastTagged(text, open, close string) (string, bool) {
	i := strings.LastIndex(text, open)
	if i < 0 {
		return "", false
	}
	rest := text[i+len(open):]
	j := strings.Index(rest, close)
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

// lastBoxed returns the argument of the last \boxed{…} (or \fbox{…}) whose
// braces balance; "\boxed 5" (a single token without braces) counts too.
func lastBoxed(text string) (string, bool) {
	at, end := -1, 0
	for _, cmd := range []string{`\boxed`, `\fbox`} {
		if i := strings.LastIndex(text, cmd); i > at {
			at, end = i, i+len(cmd)
		}
	}
	if at < 0 {
		return "", false
	}
	rest := text[end:]
	if strings.HasPrefix(rest, " ") {
		// \boxed 5: the next token.
		f := strings.Fields(rest)
		if len(f) > 0 && !strings.HasPrefix(f[0], "{") {
			return strings.TrimRight(f[0], "$."), true
		}
		rest = strings.TrimLeft(rest, " ")
	}
	// Unbalanced braces give no answer rather than a truncated one.
	inner, _, ok := braced(rest)
	return inner, ok
}

// lastNumberRE matches a number in running text: sign, digits with
// thousands separators ("1,234") or plain, a decimal part, an exponent, an
// optional "/denominator".
var lastNumberRE = regexp.MustCompile(`[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:/\d+)?|[-+]?\.\d+`)

// proseRE finds a word of running text (three letters or more, not a
// LaTeX command).
var proseRE = regexp.MustCompile(`(?:^|[^\\a-zA-Z])[a-zA-Z]{3,}`)

var (
	textCmdRE   = regexp.MustCompile(`\\(?:text|textbf|mathrm|mbox|mathbf)\{([^{}]*)\}`)
	fracShortRE = regexp.MustCompile(`\\frac(\d)(\d)`)
	sqrtShortRE = regexp.MustCompile(`\\sqrt(\d)`)
	assignRE    = regexp.MustCompile(`^[a-zA-Z]\s*=\s*`)
	mixedRE     = regexp.MustCompile(`^(-?)(\d{1,6})(?:\s+(\d{1,6})/(\d{1,6})|\s*\\frac\{(\d{1,6})\}\{(\d{1,6})\})$`)
	unitRE      = regexp.MustCompile(`^([-+]?[\d.,/]*\d%?)\s*[a-zA-Z]{2,}(?:\s+[a-zA-Z]+)*$`)
	texSpaceRE  = regexp.MustCompile(`\\[,;:! ]`)
)

// normalizeMath brings an answer to a canonical text: LaTeX display noise
// (\left, \right, $, \!, spacing commands, \dfrac/\tfrac, ^\circ, \text{}
// around units) removed, a leading "x =" dropped, trailing units words and
// full stops dropped, whitespace removed.
func normalizeMath(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\u2212", "-"))
	s = textCmdRE.ReplaceAllString(s, " $1")
	for _, r := range []struct{ old, new string }{
		{`\left`, ""}, {`\right`, ""}, {`\displaystyle`, ""},
		{`\dfrac`, `\frac`}, {`\tfrac`, `\frac`},
		{`^{\circ}`, ""}, {`^\circ`, ""}, {`\circ`, ""}, {`\%`, "%"}, {`\$`, ""}, {"$", ""},
		{`\cdot`, "*"}, {`\times`, "*"},
	} {
		s = strings.ReplaceAll(s, r.old, r.new)
	}
	s = texSpaceRE.ReplaceAllString(s, " ")
	s = fracShortRE.ReplaceAllString(s, `\frac{$1}{$2}`)
	s = sqrtShortRE.ReplaceAllString(s, `\sqrt{$1}`)
	s = strings.TrimSpace(s)
	s = assignRE.ReplaceAllString(s, "")
	// A mixed number "2 1/2" or "2\frac{1}{2}" is 5/2: read it before the
	// space that separates its parts goes.
	if m := mixedRE.FindStringSubmatch(s); m != nil {
		a, _ := strconv.Atoi(m[2])
		b, _ := strconv.Atoi(m[3] + m[5])
		c, _ := strconv.Atoi(m[4] + m[6])
		if c > 0 && b < c {
			s = fmt.Sprintf("%s%d/%d", m[1], a*c+b, c)
		}
	}
	s = strings.TrimRight(s, ". ")
	if m := unitRE.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	return strings.Join(strings.Fields(s), "")
}

// parseMathNumber reads a normalised answer as a number: a decimal with
// optional thousands separators and exponent, a fraction a/b, \frac{a}{b}
// (with a sign in front or inside), or any of these followed by "%"
// (percent reports true then).
func parseMathNumber(s string) (v float64, percent, ok bool) {
	if strings.HasSuffix(s, "%") {
		s, percent = s[:len(s)-1], true
	}
	neg := false
	for strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		neg = neg != (s[0] == '-')
		s = s[1:]
	}
	if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") {
		s = s[1 : len(s)-1]
	}
	sign := 1.0
	if neg {
		sign = -1
	}
	if strings.HasPrefix(s, `\frac{`) {
		num, rest, ok := braced(s[len(`\frac`):])
		if !ok {
			return 0, false, false
		}
		den, rest, ok := braced(rest)
		if !ok || rest != "" {
			return 0, false, false
		}
		a, _, ok1 := parseMathNumber(num)
		b, _, ok2 := parseMathNumber(den)
		if !ok1 || !ok2 || b == 0 {
			return 0, false, false
		}
		return sign * a / b, percent, true
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		a, ok1 := plainNumber(s[:i])
		b, ok2 := plainNumber(s[i+1:])
		if !ok1 || !ok2 || b == 0 {
			return 0, false, false
		}
		return sign * a / b, percent, true
	}
	x, ok := plainNumber(s)
	return sign * x, percent, ok
}

// braced splits "{a}rest" into a and rest, braces balanced.
func braced(s string) (inner, rest string, ok bool) {
	if !strings.HasPrefix(s, "{") {
		return "", "", false
	}
	depth := 0
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[1:i], s[i+1:], true
			}
		}
	}
	return "", "", false
}

var (
	plainNumberRE = regexp.MustCompile(`^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$`)
	groupedRE     = regexp.MustCompile(`^\d{1,3}(?:,\d{3})+(?:\.\d+)?$`)
)

// plainNumber parses a decimal, with thousands separators only in
// well-formed groups ("1,234.5", not "1,23").
func plainNumber(s string) (float64, bool) {
	if groupedRE.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	if !plainNumberRE.MatchString(s) {
		return 0, false
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(x, 0) {
		return 0, false
	}
	return x, true
}

// MathEqual reports whether a predicted answer equals a reference answer:
// by value when both read as numbers (|p−r| ≤ tol + 1e-9·|r|; a percentage
// matches the number itself or its hundredth: "50%" equals 50 and 0.5),
// else by their normalised text (case-insensitive).
func MathEqual(pred, ref string, tol float64) bool {
	p, r := normalizeMath(pred), normalizeMath(ref)
	if p == "" || r == "" {
		return false
	}
	pv, pp, ok1 := parseMathNumber(p)
	rv, rp, ok2 := parseMathNumber(r)
	if ok1 && ok2 {
		close := func(a, b float64) bool { return math.Abs(a-b) <= tol+1e-9*math.Abs(b) }
		switch {
		case close(pv, rv):
			return true
		case pp && !rp:
			return close(pv/100, rv)
		case rp && !pp:
			return close(pv, rv/100)
		}
		return false
	}
	return strings.EqualFold(p, r)
}

// referenceAnswer is the answer a dataset's reference holds: its marked
// answer (####, \boxed, <answer>) when it has one, else the whole text.
func referenceAnswer(ref string) string {
	if s, ok := lastTagged(ref, "<answer>", "</answer>"); ok {
		ref = s
	}
	if s, ok := extractMarked(ref); ok {
		return s
	}
	return strings.TrimSpace(ref)
}
