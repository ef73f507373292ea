package tasks

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Math answer verification, after Hugging Face's Math-Verify: ExtractAnswer
// finds the final answer of a worked solution, MathEqual parses it and the
// reference into expression trees (mathexpr.go) and compares them by value
// (mathexpr_equal.go: exact rational arithmetic where the values are
// rational, evaluation at seeded random points where they hold variables).
// engine/tasks/testdata/mathverify/cases.jsonl holds graded cases whose
// labels are Math-Verify's own (scripts/mathverify-labels.py).

// ExtractAnswer returns the final answer of a solution text. The first of
// these rules that finds one wins:
//
//  0. in the think/answer template only the last <answer>…</answer> block
//     is searched (by the rules below; a block without prose is the answer
//     itself, "x = 3/4");
//  1. \boxed{…} (or \fbox{…}), braces balanced: the last one, together
//     with the boxes just before it when they are close (under 10
//     characters apart, or under 70 with "and", "or", "," or ";" between
//     and a different content): \boxed{2} and \boxed{3} is "2,3". An
//     unbalanced box is skipped; \boxed 5 is 5;
//  2. an "answer" phrase ("The answer is 72", "Final answer: $\frac12$",
//     "answer: 5"; phrases with a colon first): after the phrase, the first
//     math environment ($…$, \(…\), \[…\], $$…$$, a bare \frac{a}{b})
//     starting within 50 characters, chained with the ones that follow it
//     joined by ",", "and" or "or"; or, on the same line, the number or
//     arithmetic expression after the last "=" within 100 characters, else
//     the first number within 50 characters ("The answer is 40 minutes,
//     i.e. 2/3 of an hour" is 40; numbers stand after a space or "=", may
//     carry a currency sign, thousands separators and a percent). Of these
//     the one ending last wins; of several phrases, the one whose answer
//     ends last. So "The answer is 72.\n\nNote: 2 steps" is 72 and "The
//     answer is 5.\n#### 6" is 5, as Math-Verify reads them;
//  3. the rest of the line after the last GSM8K marker "####" (its first
//     number when the rest is not an answer by itself: "#### $1,000." is
//     1,000);
//  4. the math environment or the number that ends last in the text.
//     Numbers here need no space before them: a sign, digits with or
//     without thousands separators ("1,234"), a decimal part, an exponent
//     ("1e3"), a denominator ("3/4"), a percent sign or word after them
//     ("25%", "25 percent").
//
// The minus sign U+2212 is "-" throughout.
//
// Of the candidates of a rule, those the parser does not read are passed
// over. It returns false when no rule applies.
func ExtractAnswer(text string) (string, bool) {
	text = strings.ReplaceAll(text, "\u2212", "-")
	if inner, ok := lastTagged(text, "<answer>", "</answer>"); ok {
		t := strings.TrimSpace(inner)
		if s, ok := extractMarked(t); ok {
			return s, true
		}
		// A block without words is the answer itself ("x = 3/4",
		// "(1, 2)"); in a sentence the answer is its last number.
		if t != "" && !proseRE.MatchString(t) {
			return t, true
		}
		if s, ok := extractLast(t); ok {
			return s, true
		}
		if t != "" {
			return t, true
		}
	}
	if s, ok := extractMarked(text); ok {
		return s, true
	}
	return extractLast(text)
}

// extractMarked applies rules 1 to 3 of ExtractAnswer.
func extractMarked(text string) (string, bool) {
	if s, ok := boxedAnswer(text); ok && strings.TrimSpace(s) != "" {
		return s, true
	}
	if s, ok := answerPhrase(text); ok {
		return s, true
	}
	return gsmMarker(text)
}

// gsmMarker reads the rest of the line after the last "####".
func gsmMarker(text string) (string, bool) {
	i := strings.LastIndex(text, "####")
	if i < 0 {
		return "", false
	}
	rest := text[i+4:]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	s := strings.TrimSpace(rest)
	if s == "" {
		return "", false
	}
	if !proseRE.MatchString(s) {
		if _, err := parseAnswer(s); err == nil {
			return s, true
		}
	}
	if m := lastNumberRE.FindString(s); m != "" {
		return m, true
	}
	return s, true
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

// boxSeparatorRE is what may stand between boxes of one answer.
var boxSeparatorRE = regexp.MustCompile(`\b(?:and|or)\b|,|;`)

// boxedAnswer reads rule 1 of ExtractAnswer: the last \boxed{…} or
// \fbox{…}, joined with the boxes before it that belong to the same
// answer (Math-Verify's extract_boxed_content, mode "last").
func boxedAnswer(text string) (string, bool) {
	var results []string
	cur, maxPos, lastStart := len(text), len(text), -1
	for {
		bi := strings.LastIndex(text[:cur], `\boxed`)
		fi := strings.LastIndex(text[:cur], `\fbox`)
		if bi < 0 && fi < 0 {
			break
		}
		start, j := bi, bi+len(`\boxed`)
		if fi > bi {
			start, j = fi, fi+len(`\fbox`)
		}
		cmdEnd := j
		for j < maxPos && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n') {
			j++
		}
		if j >= maxPos {
			break
		}
		if text[j] != '{' {
			if len(results) == 0 && j > cmdEnd {
				// \boxed 5: the next token.
				if f := strings.Fields(text[j:maxPos]); len(f) > 0 {
					results = append(results, strings.TrimRight(f[0], "$."))
				}
			}
			break
		}
		inner, _, ok := braced(text[j:maxPos])
		if !ok {
			if len(results) == 0 {
				// Unbalanced braces give no answer rather than a truncated one.
				return "", false
			}
			break
		}
		content := strings.TrimSpace(inner)
		end := j + len(inner) + 1 // the closing brace
		if lastStart >= 0 {
			between := text[end+1 : lastStart]
			if !(len(between) < 10 || content != results[len(results)-1] && len(between) < 70 && boxSeparatorRE.MatchString(between)) {
				break
			}
		}
		if len(results) == 0 || results[len(results)-1] != content {
			results = append(results, content)
		}
		lastStart, maxPos, cur = start, start, start
	}
	if len(results) == 0 {
		return "", false
	}
	for i, j := 0, len(results)-1; i < j; i, j = i+1, j-1 {
		results[i], results[j] = results[j], results[i]
	}
	return strings.Join(results, ","), true
}

// braced splits "{a}rest" into a and rest, braces balanced.
func braced(s string) (inner, rest string, ok bool) {
	if !strings.HasPrefix(s, "{") {
		return "", "", false
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
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

// candidate is a possible final answer: text[start:end] holds it, text is
// what the parser reads.
type candidate struct {
	start, end int
	text       string
}

// bestParsed returns the candidate ending last (of equal ends the one
// starting first) that the parser reads.
func bestParsed(cands []candidate) (string, bool) {
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].end != cands[j].end {
			return cands[i].end > cands[j].end
		}
		return cands[i].start < cands[j].start
	})
	for _, c := range cands {
		if _, err := parseAnswer(c.text); err == nil {
			return c.text, true
		}
	}
	return "", false
}

// answerPhrase applies rule 2 of ExtractAnswer.
func answerPhrase(text string) (string, bool) {
	lower := asciiLower(text)
	for _, colon := range []bool{true, false} {
		var cands []candidate
		for pos := 0; pos < len(text); {
			i := strings.Index(lower[pos:], "answer")
			if i < 0 {
				break
			}
			at := pos + i
			after := at + len("answer")
			if colon {
				if after >= len(text) || text[after] != ':' {
					pos = after
					continue
				}
				after++
			}
			c, ok := phraseCandidate(text, at, after)
			if !ok {
				pos = after
				continue
			}
			cands = append(cands, c)
			pos = c.end
		}
		if s, ok := bestParsed(cands); ok {
			return s, true
		}
	}
	return "", false
}

// asciiLower lowercases ASCII letters only, keeping byte offsets.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// phraseCandidate is the answer after an "answer" phrase ending at after:
// the math environment or the number, whichever ends last.
func phraseCandidate(text string, at, after int) (candidate, bool) {
	var best candidate
	found := false
	for k := after; k <= after+50 && k < len(text); k++ {
		if c, ok := envChainAt(text, k); ok {
			best, found = c, true
			break
		}
	}
	if c, ok := phraseNumber(text, after); ok && (!found || c.end > best.end) {
		best, found = c, true
	}
	best.start = at
	return best, found
}

// phraseNumber reads the number after an answer phrase, on its line: after
// the last "=" within 100 characters, else the first within 50.
func phraseNumber(text string, after int) (candidate, bool) {
	line := len(text)
	if j := strings.IndexByte(text[after:], '\n'); j >= 0 {
		line = after + j
	}
	for k := min(after+100, line-1); k >= after; k-- {
		if text[k] != '=' {
			continue
		}
		// "= 5": a space, then the number (Math-Verify's anchors).
		q := k + 1
		for q < len(text) && isSpaceByte(text[q]) {
			q++
		}
		if q > k+1 {
			if c, ok := anchoredNumber(text, q); ok {
				return c, true
			}
		}
	}
	for k := after; k <= after+50 && k < len(text); k++ {
		if k > after && text[k-1] == '\n' {
			break
		}
		if isSpaceByte(text[k]) || text[k] == '=' {
			if c, ok := anchoredNumber(text, k+1); ok {
				return c, true
			}
		}
	}
	return candidate{}, false
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

var (
	// anchoredExprRE is an arithmetic expression with an operator, followed
	// by punctuation, a space, ")" or "$" (Math-Verify's expr_re).
	anchoredExprRE = regexp.MustCompile(`^(-?\(?-?\d[\d.\s+\-*×/^()÷]*[+\-*×/^()÷][\d.\s+\-*×/^()÷]+\)?)(?:\*\*)?(?:[.,:\s)$]|$)`)
	// anchoredNumberRE is a number with thousands separators, a decimal
	// part and a percent.
	anchoredNumberRE = regexp.MustCompile(`^(?:(-?[1-9]\d{0,2}(?:[ ,]\d{3})+)(\.\d+)?|(-?\d+)(\.\d+)|(\.\d+)|(-?\d+))(\s*(?:%|[Pp]ercent|\s*[Pp]ercentage|\s*[Pp]ct))?`)
	currencySigns    = "$€£¥₹₽₪₩₫฿"
)

// anchoredNumber reads a number or arithmetic expression at pos (after
// its anchor: a space or "="), not followed by "=".
func anchoredNumber(text string, pos int) (candidate, bool) {
	if pos >= len(text) {
		return candidate{}, false
	}
	p := pos
	if strings.HasPrefix(text[p:], "**") {
		p += 2
	}
	if m := anchoredExprRE.FindStringSubmatchIndex(text[p:]); m != nil && !followedByEquals(text, p+m[3]) {
		return candidate{pos, p + m[1], strings.TrimSpace(text[p+m[2] : p+m[3]])}, true
	}
	if r, size := utf8.DecodeRuneInString(text[p:]); strings.ContainsRune(currencySigns, r) {
		p += size
	}
	m := anchoredNumberRE.FindStringSubmatchIndex(text[p:])
	if m == nil || followedByEquals(text, p+m[1]) {
		return candidate{}, false
	}
	var num string
	for g := 1; g <= 6; g++ {
		if m[2*g] >= 0 {
			num += text[p+m[2*g] : p+m[2*g+1]]
		}
	}
	num = strings.NewReplacer(",", "", " ", "").Replace(num)
	if m[14] >= 0 {
		num += "%"
	}
	return candidate{pos, p + m[1], num}, true
}

func followedByEquals(text string, i int) bool {
	for i < len(text) && isSpaceByte(text[i]) {
		i++
	}
	return i < len(text) && text[i] == '='
}

// percentSuffixRE is a percent after a math environment.
var percentSuffixRE = regexp.MustCompile(`^\s*(?:\\?%|[Pp]ercentage|[Pp]ercent|[Pp]ct)`)

// envChainAt reads the math environment at i and the ones chained to it
// by ",", "and" or "or" (five at most), joined by ", ".
var envJoinRE = regexp.MustCompile(`^\s*(?:,?and|,?or|,)\s*`)

func envChainAt(text string, i int) (candidate, bool) {
	c, ok := envAt(text, i)
	if !ok {
		return candidate{}, false
	}
	parts := []string{c.text}
	end := c.end
	for n := 0; n < 5; n++ {
		m := envJoinRE.FindStringIndex(text[end:])
		if m == nil {
			break
		}
		next, ok := envAt(text, end+m[1])
		if !ok {
			break
		}
		parts = append(parts, next.text)
		end = next.end
	}
	return candidate{i, end, strings.Join(parts, ", ")}, true
}

var simpleFracRE = regexp.MustCompile(`^-?\\frac\{-?\d+(?:[.,]\d+)?\}\{-?\d+(?:[.,]\d+)?\}`)

// envAt reads a math environment starting at i: $$…$$, \[…\], $…$ (one
// line), \(…\) (one line), " […] " (one line), or a bare \frac{a}{b} of
// numbers; a percent sign after it belongs to it.
func envAt(text string, i int) (candidate, bool) {
	prevBackslash := i > 0 && text[i-1] == '\\'
	rest := text[i:]
	var content string
	end := -1
	switch {
	case strings.HasPrefix(rest, "$$") && !prevBackslash:
		for k := i + 3; k+1 < len(text); k++ {
			if text[k] == '$' && text[k+1] == '$' && text[k-1] != '\\' {
				content, end = text[i+2:k], k+2
				break
			}
		}
	case strings.HasPrefix(rest, `\[`) && !prevBackslash:
		// The content has at least one byte: the search starts past it
		// (and past the end of a text that is only "\[").
		if k := strings.Index(text[min(i+3, len(text)):], `\]`); k >= 0 {
			k += i + 3
			content, end = text[i+2:k], k+2
		}
	case strings.HasPrefix(rest, "$") && !prevBackslash && !(i > 0 && text[i-1] >= '0' && text[i-1] <= '9'):
		for k := i + 1; k < len(text); k++ {
			if text[k] == '\\' && k+1 < len(text) && text[k+1] == '$' {
				k++
				continue
			}
			if text[k] == '\n' {
				break
			}
			if text[k] == '$' {
				if k > i+1 {
					content, end = text[i+1:k], k+1
				}
				break
			}
		}
	case strings.HasPrefix(rest, `\(`) && !prevBackslash:
		if k := strings.Index(text[i+2:], `\)`); k > 0 {
			k += i + 2
			if c := text[i+2 : k]; !strings.Contains(c, "\n") {
				content, end = c, k+2
			}
		}
	case len(rest) > 1 && isSpaceByte(rest[0]) && rest[1] == '[':
		if k := strings.IndexAny(text[i+2:], "[]\n"); k > 0 && text[i+2+k] == ']' {
			k += i + 2
			if k+1 < len(text) && isSpaceByte(text[k+1]) {
				content, end = text[i+2:k], k+2
			}
		}
	case strings.HasPrefix(rest, `\frac`) || strings.HasPrefix(rest, `-\frac`):
		if m := simpleFracRE.FindString(rest); m != "" {
			content, end = m, i+len(m)
		}
	}
	if end < 0 || strings.TrimSpace(content) == "" {
		return candidate{}, false
	}
	if m := percentSuffixRE.FindStringIndex(text[end:]); m != nil {
		content += "%"
		end += m[1]
	}
	return candidate{i, end, content}, true
}

// lastNumberRE matches a number in running text: sign, digits with
// thousands separators ("1,234") or plain, a decimal part, an exponent, an
// optional "/denominator".
var lastNumberRE = regexp.MustCompile(`[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:/\d+)?|[-+]?\.\d+`)

// extractLast applies rule 4 of ExtractAnswer: of the math environments
// and the numbers, the one ending last.
func extractLast(text string) (string, bool) {
	var cands []candidate
	for i := 0; i < len(text); {
		c, ok := envChainAt(text, i)
		if !ok {
			i++
			continue
		}
		cands = append(cands, c)
		i = c.end
	}
	for _, m := range lastNumberRE.FindAllStringIndex(text, -1) {
		c := candidate{m[0], m[1], text[m[0]:m[1]]}
		if p := percentSuffixRE.FindStringIndex(text[c.end:]); p != nil {
			// "25%" and "25 percent" are percentages.
			c.text += "%"
			c.end += p[1]
		}
		cands = append(cands, c)
	}
	if s, ok := bestParsed(cands); ok {
		return s, true
	}
	return "", false
}

// proseRE finds a word of running text (three letters or more, not a
// LaTeX command or environment name).
var proseRE = prose{regexp.MustCompile(`(?:^|[^\\a-zA-Z])[a-zA-Z]{3,}`)}

type prose struct{ re *regexp.Regexp }

// envNameRE is \begin{name} or \end{name}.
var envNameRE = regexp.MustCompile(`\\(?:begin|end)\s*\{[a-zA-Z*]*\}`)

// MatchString reports whether s holds a word of running text.
func (p prose) MatchString(s string) bool {
	return p.re.MatchString(envNameRE.ReplaceAllString(s, " "))
}

// normalizeMath brings an answer to the text FinalNumber reads: LaTeX
// display noise, units and degree signs removed (preprocessAnswer).
func normalizeMath(s string) string { return preprocessAnswer(s) }

// parseMathNumber reads a normalised answer as a number: a decimal with
// optional thousands separators and exponent, a fraction a/b, a mixed
// number, or a LaTeX expression without variables (\frac{3}{4},
// 1.5\times10^{3}, 2^{10}, \sqrt{2}), optionally an assignment (x = 4) or
// followed by "%" (percent reports true then, and v is the number before
// the sign).
func parseMathNumber(s string) (v float64, percent, ok bool) {
	s = strings.TrimSpace(s)
	plain := strings.Join(strings.Fields(s), "")
	if strings.HasSuffix(plain, "%") {
		if x, ok := plainNumber(strings.TrimSuffix(plain, "%")); ok {
			return x, true, true
		}
	}
	if x, ok := plainNumber(plain); ok {
		return x, false, true
	}
	if plainishRE.MatchString(plain) {
		// A malformed or overflowing number (1e999) is no number.
		return 0, false, false
	}
	val, err := parseAnswer(s)
	if err != nil {
		return 0, false, false
	}
	if isAssignment(val) {
		val = val.elems[len(val.elems)-1]
	}
	if val.kind != vScalar {
		return 0, false, false
	}
	x := val.x
	if x.kind == ePct {
		x, percent = x.args[0], true
	}
	syms := map[string]bool{}
	freeSymbols(x, syms)
	if len(syms) > 0 {
		return 0, false, false
	}
	if r, ok := exactValue(x); ok {
		f, _ := r.Float64()
		return f, percent, !math.IsInf(f, 0)
	}
	c := numValue(x, nil)
	if imag(c) != 0 || math.IsNaN(real(c)) || math.IsInf(real(c), 0) {
		return 0, false, false
	}
	return real(c), percent, true
}

var (
	plainNumberRE = regexp.MustCompile(`^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$`)
	plainishRE    = regexp.MustCompile(`^[-+]?[\d.,]+(?:[eE][-+]?\d+)?$`)
	groupedRE     = regexp.MustCompile(`^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$`)
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
// both are parsed (mathexpr.go) and compared by value as Math-Verify does
// (mathexpr_equal.go); tol is the absolute tolerance of numbers written
// with a decimal point. Answers equal as text (after display noise is
// removed, case and spaces ignored) are equal too, parsed or not.
func MathEqual(pred, ref string, tol float64) bool {
	p, r := strings.TrimSpace(pred), strings.TrimSpace(ref)
	if p == "" || r == "" {
		return false
	}
	pv, err1 := parseAnswer(p)
	rv, err2 := parseAnswer(r)
	if err1 == nil && err2 == nil && mathValuesEqual(rv, pv, tol) {
		return true
	}
	pt, rt := answerText(p), answerText(r)
	return pt != "" && strings.EqualFold(pt, rt)
}

// textWrapperRE is a \text{…} (or \textbf, \mathrm, \mbox) around words.
var textWrapperRE = regexp.MustCompile(`\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox)\s*\{([^{}]*)\}`)

// answerText is an answer as text for the comparison of answers the
// parser does not read: display noise removed, \text{…} unwrapped, spaces
// dropped.
func answerText(s string) string {
	s = textWrapperRE.ReplaceAllString(preprocessAnswer(s), "$1")
	return strings.Join(strings.Fields(s), "")
}

// referenceAnswer is the answer a dataset's reference holds: its marked
// answer (<answer>, \boxed, ####) when it has one, else the whole text
// when that is an answer by itself ("72", "$\frac{3}{4}$", "2\sqrt{3}"),
// else the final answer ExtractAnswer finds in it ("The answer is 72").
func referenceAnswer(ref string) string {
	ref = strings.ReplaceAll(ref, "\u2212", "-")
	if s, ok := lastTagged(ref, "<answer>", "</answer>"); ok {
		ref = s
	}
	if s, ok := boxedAnswer(ref); ok && strings.TrimSpace(s) != "" {
		return s
	}
	if s, ok := gsmMarker(ref); ok {
		return s
	}
	t := strings.TrimSpace(ref)
	if t != "" && !proseRE.MatchString(t) {
		if _, err := parseAnswer(t); err == nil {
			return t
		}
	}
	if s, ok := ExtractAnswer(t); ok {
		return s
	}
	return t
}
