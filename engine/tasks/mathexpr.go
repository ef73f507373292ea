package tasks

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strings"
)

// The math reward's answer parser: an answer (the content of \boxed{…},
// a number, a LaTeX or plain expression) becomes a value tree, compared by
// mathValuesEqual (mathexpr_equal.go). It reads the LaTeX that solutions
// of GSM8K- and MATH-style problems end with: numbers (1,000, 1{,}000,
// .5, 2\frac{1}{2}), + − · × ÷ / ^ and implicit products, \frac, \sqrt[n],
// \binom, !, %, |x|, \lfloor \rceil, the elementary functions (\log is
// base 10, \ln base e), π, e, ∞, Greek letters and subscripted symbols,
// \text{…} (a symbol: \text{(B)} is the choice b, \text{yes} the word),
// comma lists, \{sets\}, (tuples), [intervals), ∪, matrices
// (pmatrix/bmatrix), ± (a two-element set) and relations (=, <, ≤, >, ≥,
// ≠, \in; a = b = c chains). Letters are lowercased, as Math-Verify does.
// Display noise is removed first (preprocessAnswer): $, \left/\right,
// spacing commands, \displaystyle, ^\circ and °, trailing units (a final
// \text{…}, optionally squared, and trailing unit words after a number).

// exprKind is the kind of a scalar expression node.
type exprKind uint8

const (
	eNum   exprKind = iota // num (exact); inexact when written with a decimal point
	eSym                   // a free variable, name lowercased
	eConst                 // name: "pi", "e" or "inf"
	eAdd                   // sum of args
	eMul                   // product of args
	eNeg                   // −args[0]
	eDiv                   // args[0] / args[1]
	ePow                   // args[0] ^ args[1]
	eFunc                  // name(args…)
	ePct                   // args[0] percent (args[0]/100)
)

// expr is a scalar expression.
type expr struct {
	kind    exprKind
	num     *big.Rat
	inexact bool
	name    string
	args    []*expr
}

// valKind is the kind of a parsed answer.
type valKind uint8

const (
	vScalar   valKind = iota // x
	vList                    // "1, 2": a bare comma list (a finite set)
	vSet                     // \{1, 2\}, 2 \pm 1
	vTuple                   // (1, 2, 3)
	vPair                    // (1, 2): an open interval or an ordered pair
	vInterval                // [1, 2), …: elems are the endpoints
	vUnion                   // I ∪ J: elems are intervals, pairs or sets
	vMatrix                  // elems row-major, rows × cols
	vRel                     // elems[0] ops[0] elems[1] ops[1] …
)

// mval is a parsed answer.
type mval struct {
	kind           valKind
	x              *expr
	elems          []*mval
	loOpen, hiOpen bool
	rows, cols     int
	ops            []string // "=", "<", "<=", ">", ">=", "!=", "in"
}

func scalarVal(x *expr) *mval { return &mval{kind: vScalar, x: x} }

func numExpr(r *big.Rat, inexact bool) *expr { return &expr{kind: eNum, num: r, inexact: inexact} }

func intExpr(n int64) *expr { return numExpr(new(big.Rat).SetInt64(n), false) }

// ---- preprocessing ----------------------------------------------------

var (
	answerReplacer = strings.NewReplacer(
		`\\`, `\\`, // a matrix row break stays (before "\ " is a space)
		"\u2212", "-", "\u2013", "-", "\u00d7", `\times `, "\u00b7", `\cdot `, "\u22c5", `\cdot `,
		"\u00f7", `\div `, "\u2264", `\le `, "\u2265", `\ge `, "\u2260", `\ne `, "\u03c0", `\pi `,
		"\u221e", `\infty `, "\u00b0", "", "\u221a", `\sqrt`, "\u222a", `\cup `, "\u2208", `\in `,
		"\u00b1", `\pm `,
		`\$`, "", "$", "", `\displaystyle`, "", `\textstyle`, "", `\!`, "", `\limits`, "",
		`\rightarrow`, `\rightarrow`, `\leftarrow`, `\leftarrow`, `\leftrightarrow`, `\leftrightarrow`,
		`\bigcup`, `\cup `, `\bigcap`, `\cap `,
		`\left.`, "", `\right.`, "", `\left\lbrace`, `\{`, `\right\rbrace`, `\}`,
		`\lbrace`, `\{`, `\rbrace`, `\}`, `\langle`, "(", `\rangle`, ")",
		`\left`, "", `\right`, "", `\bigl`, "", `\bigr`, "", `\Bigl`, "", `\Bigr`, "",
		`\biggl`, "", `\biggr`, "", `\Biggl`, "", `\Biggr`, "",
		`\bigg`, "", `\Bigg`, "", `\big`, "", `\Big`, "",
		`\qquad`, " ", `\quad`, " ", `\,`, " ", `\;`, " ", `\:`, " ", `\ `, " ", "~", " ",
		`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\cfrac`, `\frac`, `\dbinom`, `\binom`, `\tbinom`, `\binom`,
		`\leqslant`, `\le `, `\geqslant`, `\ge `, `\neq`, `\ne `, `\leq`, `\le `, `\geq`, `\ge `,
		`\lt`, "<", `\gt`, ">", `\to`, `\rightarrow`,
		`\%`, "%", `\textpercent`, "%",
	)
	degreeRE       = regexp.MustCompile(`\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\^\s*\{\s*\\degree\s*\}|\\degree`)
	percentWordRE  = regexp.MustCompile(`\\(?:text|mbox|mathrm)\{\s*(?:percent|percentage|pct)\s*\}|\s*\b(?:percentage|percent|pct)\b`)
	textAndOrRE    = regexp.MustCompile(`,?\s*\\(?:text|mbox|mathrm)\{\s*(?:and|or)\s*\}`)
	plainAndOrRE   = regexp.MustCompile(`(^|[^a-zA-Z\\])(,?\s*(?:and|or))([^a-zA-Z]|$)`)
	latexThousands = regexp.MustCompile(`(\d)\{,\}(\d{3})`)
	commaNumberRE  = regexp.MustCompile(`^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$`)
	spaceNumberRE  = regexp.MustCompile(`^-?\d{1,3}(?: \d{3})+(?:\.\d+)?$`)
	mixedNumberRE  = regexp.MustCompile(`^(-?)(\d+)\s+(\d+)\s*/\s*(\d+)$`)
	trailingTextRE = regexp.MustCompile(`\\(?:text|mbox|mathrm|textrm|textnormal|textbf|textit)\s*\{[^{}]*\}\s*(?:\^\s*\{?\s*[23]\s*\}?)?$`)
	unitWordsRE    = regexp.MustCompile(`([\d}%])(\s*)((?:[a-zA-Z]+\.?\s*)+)(?:\^\s*\{?\s*[23]\s*\}?)?$`)
	fracShort1RE   = regexp.MustCompile(`\\frac\s*(\d)\s*(\d)`)
	fracShort2RE   = regexp.MustCompile(`\\frac\s*(\d)\s*\{`)
	fracShort3RE   = regexp.MustCompile(`\\frac\s*\{([^{}]*)\}\s*(\d)`)
	sqrtShortRE    = regexp.MustCompile(`\\sqrt\s*(\d)`)
	sqrtWordRE     = regexp.MustCompile(`(^|[^\\a-zA-Z])sqrt\s*`)
	malformedPowRE = regexp.MustCompile(`\^\s?\(([^()]*)\)`)
)

// unitWords are the words dropped after a number at the end of an answer
// (plurals too: "5 inches", "18 dollars", "24 square units"); the
// abbreviations may follow the number without a space ("5cm"). Single
// letters never are (2x, 5m are products), nor words that are not units
// (2 xy is 2xy).
var unitWords, unitAbbreviations = wordSet(`mm cm km meter metre inch foot feet yard mile
	mg kg gram kilogram pound ounce ton tonne gm
	sec second minute hour day week month year decade century
	dollar cent euro rupee yen
	ml liter litre gallon cup quart pint
	square sq cubic cu unit acre hectare degree radian rad mph kmph kmh kph
	way point student people person apple book coin marble item page egg ticket box tile digit edge
	cookie candy pencil game child children friend`),
	wordSet(`mm cm km mg kg ml ft yd hr hrs min mph kmh kph sec lb lbs oz cc deg`)

func wordSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// isUnitWord reports whether w (lowercased) is a unit, or its plural.
func isUnitWord(w string) bool {
	w = strings.ToLower(strings.TrimSuffix(w, "."))
	if unitWords[w] || unitAbbreviations[w] {
		return true
	}
	for _, suffix := range []string{"s", "es"} {
		if t, ok := strings.CutSuffix(w, suffix); ok && unitWords[t] {
			return true
		}
	}
	return false
}

// preprocessAnswer removes display noise, units and degree signs from an
// answer and expands LaTeX shorthands (\frac12, \sqrt3, 1{,}000).
func preprocessAnswer(s string) string {
	s = strings.TrimSpace(s)
	if strings.Contains(s, `\boxed`) || strings.Contains(s, `\fbox`) {
		if b, ok := boxedAnswer(s); ok {
			s = b
		}
	}
	s = answerReplacer.Replace(s)
	s = degreeRE.ReplaceAllString(s, "")
	s = percentWordRE.ReplaceAllString(s, "%")
	s = textAndOrRE.ReplaceAllString(s, ",")
	s = plainAndOrRE.ReplaceAllString(s, "$1,$3")
	s = latexThousands.ReplaceAllString(s, "$1$2")
	s = strings.ReplaceAll(s, "{,}", ",")
	s = sqrtWordRE.ReplaceAllString(s, `$1\sqrt`)
	s = strings.TrimSpace(s)
	s = strings.TrimRight(s, " .;:")
	for i := 0; i < 2; i++ {
		if loc := trailingTextRE.FindStringIndex(s); loc != nil && loc[0] > 0 {
			if rest := strings.TrimSpace(s[:loc[0]]); rest != "" && !strings.HasSuffix(rest, "=") {
				s = rest
			}
		}
		if m := unitWordsRE.FindStringSubmatchIndex(s); m != nil {
			words := strings.Fields(strings.ReplaceAll(s[m[6]:m[7]], ".", " "))
			unit := len(words) > 0 && (m[5] > m[4] || unitAbbreviations[strings.ToLower(words[0])])
			for _, w := range words {
				unit = unit && isUnitWord(w)
			}
			if unit {
				s = strings.TrimSpace(s[:m[3]])
			}
		}
	}
	s = fracShort1RE.ReplaceAllString(s, `\frac{$1}{$2}`)
	s = fracShort2RE.ReplaceAllString(s, `\frac{$1}{`)
	s = fracShort3RE.ReplaceAllString(s, `\frac{$1}{$2}`)
	s = sqrtShortRE.ReplaceAllString(s, `\sqrt{$1}`)
	s = malformedPowRE.ReplaceAllString(s, `^{$1}`)
	s = strings.TrimSpace(s)
	if commaNumberRE.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	} else if spaceNumberRE.MatchString(s) {
		s = strings.ReplaceAll(s, " ", "")
	}
	if m := mixedNumberRE.FindStringSubmatch(s); m != nil {
		// "2 1/2" is a mixed number, 5/2.
		s = m[1] + `(` + m[2] + `+` + m[3] + `/` + m[4] + `)`
	}
	return s
}

// ---- tokens -------------------------------------------------------------

type tokKind uint8

const (
	tEOF    tokKind = iota
	tNum            // digits with an optional decimal part
	tLetter         // one ASCII letter
	tCmd            // \name (text is the name); \begin{env} is "begin:env"
	tText           // \text{…} and friends: text is the content
	tOp             // punctuation: + - * / ^ _ ( ) [ ] { } | , ; = < > ! ' & % and "\{", "\}", "\\"
)

type token struct {
	kind tokKind
	text string
}

// textCommands read their braced argument as text.
var textCommands = map[string]bool{"text": true, "textbf": true, "textit": true, "textrm": true, "textnormal": true,
	"textsf": true, "texttt": true, "mathrm": true, "mathbf": true, "mathit": true, "mathsf": true, "mbox": true,
	"emph": true, "operatorname": true, "mathbb": true, "mathcal": true, "boldsymbol": true}

// errParse is the error of an answer the parser does not read.
var errParse = errors.New("not a math answer")

func tokenize(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j < len(s) && s[j] == '.' && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9' {
				j++
				for j < len(s) && s[j] >= '0' && s[j] <= '9' {
					j++
				}
			}
			toks = append(toks, token{tNum, s[i:j]})
			i = j
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			toks = append(toks, token{tLetter, s[i : i+1]})
			i++
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errParse
			}
			j := i + 1
			for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z') {
				j++
			}
			if j == i+1 {
				// \{ \} \\ \| and the like.
				switch s[i+1] {
				case '{', '}':
					toks = append(toks, token{tOp, s[i : i+2]})
				case '\\':
					toks = append(toks, token{tOp, `\\`})
				case '|':
					toks = append(toks, token{tOp, "|"})
				case '%':
					toks = append(toks, token{tOp, "%"})
				case ',', ';', ':', '!', ' ':
				default:
					return nil, errParse
				}
				i += 2
				continue
			}
			name := s[i+1 : j]
			i = j
			if textCommands[name] || name == "begin" || name == "end" {
				for i < len(s) && s[i] == ' ' {
					i++
				}
				inner, rest, ok := braced(s[i:])
				if !ok {
					return nil, errParse
				}
				i = len(s) - len(rest)
				switch name {
				case "begin", "end":
					toks = append(toks, token{tCmd, name + ":" + strings.TrimSpace(inner)})
				case "operatorname":
					toks = append(toks, token{tCmd, strings.TrimSpace(inner)})
				case "mathbb", "mathcal", "boldsymbol", "mathbf":
					// Letters in a font: the letters themselves (\mathbf{v}, \mathbb{R}).
					t := strings.TrimSpace(inner)
					if name == "mathbb" && t == "R" {
						toks = append(toks, token{tCmd, "reals"})
					} else if len(t) == 1 {
						toks = append(toks, token{tLetter, t})
					} else {
						toks = append(toks, token{tText, t})
					}
				default:
					toks = append(toks, token{tText, inner})
				}
				continue
			}
			toks = append(toks, token{tCmd, name})
		case strings.IndexByte("+-*/^_()[]{}|,;=<>!'&%:", c) >= 0:
			toks = append(toks, token{tOp, s[i : i+1]})
			i++
		default:
			return nil, errParse
		}
	}
	return toks, nil
}

// ---- parser ---------------------------------------------------------------

type mparser struct {
	toks     []token
	i        int
	absDepth int
	depth    int
}

// maxParseDepth bounds the nesting of an answer (and the parser's stack).
const maxParseDepth = 200

// parseAnswer parses an answer (after preprocessAnswer).
func parseAnswer(s string) (v *mval, err error) {
	s = preprocessAnswer(s)
	if s == "" {
		return nil, errParse
	}
	v, err = parseTokens(s)
	if err != nil {
		// What the parser does not read may still end in "= answer"
		// (\int_0^2 x^2\,dx = \frac{8}{3}): an equation of that right side
		// with an unknown left side, as Math-Verify falls back to the last
		// equation.
		if i := lastEquals(s); i >= 0 {
			if rhs, err2 := parseTokens(s[i+1:]); err2 == nil && rhs.kind != vRel {
				lhs := scalarVal(&expr{kind: eSym, name: "?lhs"})
				return &mval{kind: vRel, elems: []*mval{lhs, rhs}, ops: []string{"="}}, nil
			}
		}
	}
	return v, err
}

// lastEquals is the index of the last "=" of s that is not part of <=, >=
// or !=, or -1.
func lastEquals(s string) int {
	for i := len(s) - 1; i > 0; i-- {
		if s[i] == '=' && !strings.ContainsRune("<>!\\", rune(s[i-1])) {
			return i
		}
	}
	return -1
}

// parseTokens parses a preprocessed answer.
func parseTokens(s string) (v *mval, err error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	p := &mparser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(parseError); ok {
				v, err = nil, e
				return
			}
			panic(r)
		}
	}()
	items := p.parseList()
	if p.peek().kind != tEOF {
		p.fail("unexpected %q", p.peek().text)
	}
	if len(items) == 1 {
		return items[0], nil
	}
	return &mval{kind: vList, elems: items}, nil
}

type parseError struct{ msg string }

func (e parseError) Error() string { return e.msg }

func (p *mparser) fail(format string, args ...any) {
	panic(parseError{fmt.Sprintf(format, args...)})
}

func (p *mparser) peek() token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return token{kind: tEOF}
}

func (p *mparser) next() token {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func (p *mparser) isOp(s string) bool {
	t := p.peek()
	return t.kind == tOp && t.text == s
}

func (p *mparser) isCmd(names ...string) bool {
	t := p.peek()
	if t.kind != tCmd {
		return false
	}
	for _, n := range names {
		if t.text == n {
			return true
		}
	}
	return false
}

func (p *mparser) expectOp(s string) {
	if !p.isOp(s) {
		p.fail("expected %q", s)
	}
	p.next()
}

func (p *mparser) enter() {
	p.depth++
	if p.depth > maxParseDepth {
		p.fail("too deep")
	}
}

func (p *mparser) leave() { p.depth-- }

// parseList reads relations separated by commas or semicolons.
func (p *mparser) parseList() []*mval {
	items := []*mval{p.parseRelation()}
	for p.isOp(",") || p.isOp(";") {
		p.next()
		items = append(items, p.parseRelation())
	}
	return items
}

// relOp returns the relation at the current token, if any, consuming it.
func (p *mparser) relOp() (string, bool) {
	t := p.peek()
	switch {
	case t.kind == tOp && t.text == "=":
		p.next()
		return "=", true
	case t.kind == tOp && (t.text == "<" || t.text == ">"):
		p.next()
		if p.isOp("=") {
			p.next()
			return t.text + "=", true
		}
		return t.text, true
	case t.kind == tOp && t.text == "!" && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == tOp && p.toks[p.i+1].text == "=":
		p.i += 2
		return "!=", true
	case t.kind == tCmd:
		switch t.text {
		case "le":
			p.next()
			return "<=", true
		case "ge":
			p.next()
			return ">=", true
		case "ne":
			p.next()
			return "!=", true
		case "in":
			p.next()
			return "in", true
		case "approx", "equiv", "simeq":
			p.next()
			return "approx", true
		}
	}
	return "", false
}

func (p *mparser) parseRelation() *mval {
	p.enter()
	defer p.leave()
	first := p.parseSetExpr()
	op, ok := p.relOp()
	if !ok {
		return first
	}
	if op == "approx" {
		// x ≈ 3.14 means 3.14; 22/7 ≈ 3.14 means 22/7 (Math-Verify's reading).
		rhs := p.parseSetExpr()
		if first.kind == vScalar && onlySymbols(first.x) {
			return rhs
		}
		return first
	}
	rel := &mval{kind: vRel, elems: []*mval{first}}
	for {
		rel.ops = append(rel.ops, op)
		rel.elems = append(rel.elems, p.parseSetExpr())
		if op, ok = p.relOp(); !ok || op == "approx" {
			if ok {
				p.parseSetExpr()
			}
			break
		}
	}
	return rel
}

func (p *mparser) parseSetExpr() *mval {
	a := p.parseExpr()
	if !p.isCmd("cup") {
		return a
	}
	u := &mval{kind: vUnion}
	add := func(v *mval) {
		switch v.kind {
		case vInterval, vPair, vSet:
			u.elems = append(u.elems, v)
		case vUnion:
			u.elems = append(u.elems, v.elems...)
		default:
			p.fail("∪ of a non-set")
		}
	}
	add(a)
	for p.isCmd("cup") {
		p.next()
		add(p.parseExpr())
	}
	return u
}

func (p *mparser) scalar(v *mval) *expr {
	if v.kind != vScalar {
		p.fail("arithmetic on a non-scalar")
	}
	return v.x
}

func (p *mparser) parseExpr() *mval {
	p.enter()
	defer p.leave()
	left := p.parseTerm()
	var acc *expr // the sum this loop builds, extended in place
	add := func(x *expr) {
		if l := p.scalar(left); l == acc {
			acc.args = append(acc.args, x)
		} else {
			acc = addExpr(l, x)
		}
		left = scalarVal(acc)
	}
	for {
		switch {
		case p.isOp("+"):
			p.next()
			add(p.scalar(p.parseTerm()))
		case p.isOp("-"):
			p.next()
			add(negExpr(p.scalar(p.parseTerm())))
		case p.isCmd("pm", "mp"):
			neg := p.next().text == "mp"
			l := p.scalar(left)
			r := p.scalar(p.parseTerm())
			a, b := addExpr(l, r), addExpr(l, negExpr(r))
			if neg {
				a, b = b, a
			}
			left = &mval{kind: vSet, elems: []*mval{scalarVal(a), scalarVal(b)}}
			if p.isOp("+") || p.isOp("-") || p.isCmd("pm", "mp") {
				p.fail("arithmetic after ±")
			}
		default:
			return left
		}
	}
}

func addExpr(a, b *expr) *expr {
	var args []*expr
	for _, x := range []*expr{a, b} {
		if x.kind == eAdd {
			args = append(args, x.args...)
		} else {
			args = append(args, x)
		}
	}
	return &expr{kind: eAdd, args: args}
}

func mulExpr(a, b *expr) *expr {
	var args []*expr
	for _, x := range []*expr{a, b} {
		if x.kind == eMul {
			args = append(args, x.args...)
		} else {
			args = append(args, x)
		}
	}
	return &expr{kind: eMul, args: args}
}

func negExpr(a *expr) *expr { return &expr{kind: eNeg, args: []*expr{a}} }

// isIntLiteral reports whether x is a non-negative integer written as one
// number (the whole part of a mixed number), or its negation.
func isIntLiteral(x *expr) (neg, ok bool) {
	if x.kind == eNeg {
		_, ok := isIntLiteral(x.args[0])
		return true, ok && x.args[0].kind == eNum
	}
	return false, x.kind == eNum && !x.inexact && x.num.IsInt()
}

// isSimpleFrac reports whether x is \frac{a}{b} of integer literals.
func isSimpleFrac(x *expr) bool {
	if x.kind != eDiv {
		return false
	}
	a, b := x.args[0], x.args[1]
	return a.kind == eNum && b.kind == eNum && !a.inexact && !b.inexact && a.num.IsInt() && b.num.IsInt()
}

func (p *mparser) parseTerm() *mval {
	p.enter()
	defer p.leave()
	left := p.parseUnary()
	var acc *expr // the product this loop builds, extended in place
	mul := func(x *expr) {
		if l := p.scalar(left); l == acc && x.kind != eMul {
			acc.args = append(acc.args, x)
		} else {
			acc = mulExpr(l, x)
		}
		left = scalarVal(acc)
	}
	for {
		switch {
		case p.isOp("*") || p.isCmd("cdot", "times", "ast"):
			p.next()
			mul(p.scalar(p.parseUnary()))
		case p.isOp("/") || p.isOp(":") || p.isCmd("div"):
			p.next()
			left = scalarVal(&expr{kind: eDiv, args: []*expr{p.scalar(left), p.scalar(p.parseUnary())}})
		case p.startsAtom():
			mixed := p.isCmd("frac") && left.kind == vScalar
			right := p.parsePower()
			if mixed {
				if neg, ok := isIntLiteral(left.x); ok && right.kind == vScalar && isSimpleFrac(right.x) {
					// 2\frac{1}{2} is 5/2, −2\frac{1}{3} is −7/3.
					if neg {
						left = scalarVal(negExpr(addExpr(left.x.args[0], right.x)))
					} else {
						left = scalarVal(addExpr(left.x, right.x))
					}
					continue
				}
			}
			mul(p.scalar(right))
		default:
			return left
		}
	}
}

func (p *mparser) parseUnary() *mval {
	p.enter()
	defer p.leave()
	switch {
	case p.isOp("-"):
		p.next()
		v := p.parseUnary()
		return scalarVal(negExpr(p.scalar(v)))
	case p.isOp("+"):
		p.next()
		return p.parseUnary()
	case p.isCmd("pm", "mp"):
		p.next()
		x := p.scalar(p.parseUnary())
		return &mval{kind: vSet, elems: []*mval{scalarVal(x), scalarVal(negExpr(x))}}
	}
	return p.parsePower()
}

// atomCommands are the commands that start an atom.
var atomCommands = map[string]bool{"emptyset": true, "varnothing": true, "reals": true, "pi": true, "infty": true, "infinity": true, "frac": true, "sqrt": true, "binom": true,
	"lfloor": true, "lceil": true, "boxed": true, "fbox": true, "exponentialE": true}

// funcNames are the functions the parser knows, by LaTeX name.
var funcNames = map[string]string{"sin": "sin", "cos": "cos", "tan": "tan", "sec": "sec", "csc": "csc", "cot": "cot",
	"arcsin": "asin", "arccos": "acos", "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
	"ln": "ln", "log": "log", "lg": "log", "exp": "exp", "abs": "abs"}

// greek letters are symbols named by the letter.
var greek = map[string]bool{"alpha": true, "beta": true, "gamma": true, "delta": true, "epsilon": true, "varepsilon": true,
	"zeta": true, "eta": true, "theta": true, "vartheta": true, "iota": true, "kappa": true, "lambda": true, "mu": true,
	"nu": true, "xi": true, "rho": true, "sigma": true, "tau": true, "upsilon": true, "phi": true, "varphi": true,
	"chi": true, "psi": true, "omega": true, "Gamma": true, "Delta": true, "Theta": true, "Lambda": true, "Xi": true,
	"Sigma": true, "Phi": true, "Psi": true, "Omega": true, "ell": true}

func (p *mparser) startsAtom() bool {
	t := p.peek()
	switch t.kind {
	case tNum, tLetter, tText:
		return true
	case tCmd:
		_, fn := funcNames[t.text]
		return atomCommands[t.text] || fn || greek[t.text] || strings.HasPrefix(t.text, "begin:")
	case tOp:
		switch t.text {
		case "(", "{":
			return true
		case "|":
			return p.absDepth == 0
		}
	}
	return false
}

func (p *mparser) parsePower() *mval {
	p.enter()
	defer p.leave()
	base := p.parseAtom()
	for {
		switch {
		case p.isOp("!"):
			if p.i+1 < len(p.toks) && p.toks[p.i+1].kind == tOp && p.toks[p.i+1].text == "=" {
				return base // a != b
			}
			p.next()
			base = scalarVal(&expr{kind: eFunc, name: "factorial", args: []*expr{p.scalar(base)}})
		case p.isOp("%"):
			p.next()
			base = scalarVal(&expr{kind: ePct, args: []*expr{p.scalar(base)}})
		case p.isOp("^"):
			p.next()
			e := p.parseExponent()
			if base.kind == vMatrix {
				p.fail("matrix power")
			}
			base = scalarVal(&expr{kind: ePow, args: []*expr{p.scalar(base), e}})
		case p.isOp("'"):
			p.fail("prime")
		default:
			return base
		}
	}
}

func (p *mparser) parseExponent() *expr {
	switch {
	case p.isOp("{"):
		p.next()
		v := p.parseRelationInGroup("}")
		return p.scalar(v)
	case p.isOp("-"):
		p.next()
		return negExpr(p.scalar(p.parseAtom()))
	case p.isOp("+"):
		p.next()
	}
	return p.scalar(p.parseAtom())
}

// parseRelationInGroup reads one item up to the closing token.
func (p *mparser) parseRelationInGroup(close string) *mval {
	items := p.parseList()
	p.expectOp(close)
	if len(items) != 1 {
		return &mval{kind: vSet, elems: items}
	}
	return items[0]
}

// parseArg reads a command's argument: a braced group or one token.
func (p *mparser) parseArg() *expr {
	if p.isOp("{") {
		p.next()
		return p.scalar(p.parseRelationInGroup("}"))
	}
	return p.scalar(p.parseAtom())
}

// parseFuncArg reads a function's argument: (…), {…}, or the implicit
// product that follows (\sin 2x is sin(2x)).
func (p *mparser) parseFuncArg() *expr {
	switch {
	case p.isOp("("):
		p.next()
		return p.scalar(p.parseRelationInGroup(")"))
	case p.isOp("{"):
		p.next()
		return p.scalar(p.parseRelationInGroup("}"))
	case p.isOp("-"):
		p.next()
		return negExpr(p.parseFuncArg())
	}
	x := p.scalar(p.parsePower())
	for p.startsAtom() && !p.isFuncStart() {
		x = mulExpr(x, p.scalar(p.parsePower()))
	}
	return x
}

func (p *mparser) isFuncStart() bool {
	t := p.peek()
	_, ok := funcNames[t.text]
	return t.kind == tCmd && ok
}

func (p *mparser) parseAtom() *mval {
	p.enter()
	defer p.leave()
	t := p.next()
	switch t.kind {
	case tNum:
		r, ok := new(big.Rat).SetString(t.text)
		if !ok {
			p.fail("bad number %q", t.text)
		}
		if p.isOp("_") {
			// A base: 1011_2 reads 1011, as Math-Verify reads it.
			p.next()
			p.subscript()
		}
		return scalarVal(numExpr(r, strings.Contains(t.text, ".")))
	case tLetter:
		name := strings.ToLower(t.text)
		if p.isOp("_") {
			p.next()
			name += "_" + p.subscript()
		} else if name == "e" {
			return scalarVal(&expr{kind: eConst, name: "e"})
		}
		return scalarVal(&expr{kind: eSym, name: name})
	case tText:
		return scalarVal(textExpr(t.text))
	case tCmd:
		return p.parseCommand(t.text)
	case tOp:
		switch t.text {
		case "(", "[":
			return p.parseBracketed(t.text)
		case "{":
			return p.parseRelationInGroup("}")
		case `\{`:
			if p.isOp(`\}`) {
				p.next()
				return &mval{kind: vSet}
			}
			items := p.parseList()
			p.expectOp(`\}`)
			return &mval{kind: vSet, elems: items}
		case "|":
			p.absDepth++
			x := p.scalar(p.parseExpr())
			p.expectOp("|")
			p.absDepth--
			return scalarVal(&expr{kind: eFunc, name: "abs", args: []*expr{x}})
		}
	}
	p.fail("unexpected %q", t.text)
	return nil
}

// textExpr reads \text{…}: a number, Euler's e, or a symbol named by the
// lowercased text without spaces and parentheses (\text{(B)} is b).
func textExpr(s string) *expr {
	t := strings.Map(func(r rune) rune {
		switch r {
		case ' ', '(', ')', '\t', '\n':
			return -1
		}
		return r
	}, strings.ToLower(s))
	if r, ok := new(big.Rat).SetString(t); ok && plainNumberRE.MatchString(t) {
		return numExpr(r, strings.Contains(t, "."))
	}
	if t == "e" {
		return &expr{kind: eConst, name: "e"}
	}
	return &expr{kind: eSym, name: t}
}

// subscript reads a subscript as text: _1, _{12}, _n.
func (p *mparser) subscript() string {
	if p.isOp("{") {
		p.next()
		var b strings.Builder
		depth := 1
		for {
			t := p.next()
			switch {
			case t.kind == tEOF:
				p.fail("unclosed subscript")
			case t.kind == tOp && t.text == "{":
				depth++
			case t.kind == tOp && t.text == "}":
				depth--
				if depth == 0 {
					return strings.ToLower(b.String())
				}
			}
			b.WriteString(t.text)
		}
	}
	t := p.next()
	if t.kind == tEOF {
		p.fail("empty subscript")
	}
	return strings.ToLower(t.text)
}

func (p *mparser) parseCommand(name string) *mval {
	switch {
	case name == "pi":
		return scalarVal(&expr{kind: eConst, name: "pi"})
	case name == "infty" || name == "infinity":
		return scalarVal(&expr{kind: eConst, name: "inf"})
	case name == "emptyset" || name == "varnothing":
		return &mval{kind: vSet}
	case name == "reals":
		inf := &expr{kind: eConst, name: "inf"}
		return &mval{kind: vInterval, elems: []*mval{scalarVal(negExpr(inf)), scalarVal(inf)}, loOpen: true, hiOpen: true}
	case name == "exponentialE":
		return scalarVal(&expr{kind: eConst, name: "e"})
	case greek[name]:
		sym := strings.ToLower(name)
		if p.isOp("_") {
			p.next()
			sym += "_" + p.subscript()
		}
		return scalarVal(&expr{kind: eSym, name: sym})
	case name == "frac":
		a := p.parseArg()
		b := p.parseArg()
		return scalarVal(&expr{kind: eDiv, args: []*expr{a, b}})
	case name == "binom":
		a := p.parseArg()
		b := p.parseArg()
		return scalarVal(&expr{kind: eFunc, name: "binom", args: []*expr{a, b}})
	case name == "sqrt":
		if p.isOp("[") {
			p.next()
			n := p.scalar(p.parseRelationInGroup("]"))
			x := p.parseArg()
			return scalarVal(&expr{kind: eFunc, name: "root", args: []*expr{x, n}})
		}
		return scalarVal(&expr{kind: eFunc, name: "sqrt", args: []*expr{p.parseArg()}})
	case name == "boxed" || name == "fbox":
		if !p.isOp("{") {
			p.fail("\\boxed without braces")
		}
		p.next()
		return p.parseRelationInGroup("}")
	case name == "lfloor" || name == "lceil":
		x := p.scalar(p.parseExpr())
		closer := "rfloor"
		if name == "lceil" {
			closer = "rceil"
		}
		if !p.isCmd(closer) {
			p.fail("expected \\%s", closer)
		}
		p.next()
		return scalarVal(&expr{kind: eFunc, name: strings.TrimPrefix(name, "l"), args: []*expr{x}})
	case strings.HasPrefix(name, "begin:"):
		return p.parseMatrix(strings.TrimPrefix(name, "begin:"))
	}
	if fn, ok := funcNames[name]; ok {
		var base *expr
		if fn == "log" || fn == "ln" {
			if p.isOp("_") {
				p.next()
				base = p.parseArg()
				fn = "log"
			}
		}
		var pow *expr
		if p.isOp("^") {
			p.next()
			pow = p.parseExponent()
			if pow.kind == eNeg && pow.args[0].kind == eNum && pow.args[0].num.Cmp(big.NewRat(1, 1)) == 0 {
				// \sin^{-1} x is arcsin x.
				if inv, ok := map[string]string{"sin": "asin", "cos": "acos", "tan": "atan"}[fn]; ok {
					fn, pow = inv, nil
				}
			}
		}
		arg := p.parseFuncArg()
		var x *expr
		switch {
		case fn == "log" && base == nil:
			x = &expr{kind: eFunc, name: "log", args: []*expr{arg, intExpr(10)}}
		case fn == "log":
			x = &expr{kind: eFunc, name: "log", args: []*expr{arg, base}}
		default:
			x = &expr{kind: eFunc, name: fn, args: []*expr{arg}}
		}
		if pow != nil {
			x = &expr{kind: ePow, args: []*expr{x, pow}}
		}
		return scalarVal(x)
	}
	p.fail("unknown command \\%s", name)
	return nil
}

func (p *mparser) parseMatrix(env string) *mval {
	switch env {
	case "pmatrix", "bmatrix", "matrix", "Bmatrix", "smallmatrix", "array":
	default:
		p.fail("environment %s", env)
	}
	if env == "array" && p.isOp("{") {
		// Column spec.
		for !p.isOp("}") {
			if p.next().kind == tEOF {
				p.fail("unclosed array")
			}
		}
		p.next()
	}
	m := &mval{kind: vMatrix}
	var row []*mval
	flush := func() {
		if len(row) == 0 {
			return
		}
		if m.cols == 0 {
			m.cols = len(row)
		} else if len(row) != m.cols {
			p.fail("ragged matrix")
		}
		m.elems = append(m.elems, row...)
		m.rows++
		row = nil
	}
	for {
		if p.isCmd("end:" + env) {
			p.next()
			flush()
			if m.rows == 0 {
				p.fail("empty matrix")
			}
			return m
		}
		row = append(row, scalarVal(p.scalar(p.parseExpr())))
		switch {
		case p.isOp("&"):
			p.next()
		case p.isOp(`\\`):
			p.next()
			flush()
		case p.isCmd("end:" + env):
		default:
			p.fail("bad matrix")
		}
	}
}

// parseBracketed reads what follows ( or [: a group, a pair, an interval
// or a tuple.
func (p *mparser) parseBracketed(open string) *mval {
	items := p.parseList()
	t := p.next()
	if t.kind != tOp || t.text != ")" && t.text != "]" {
		p.fail("unclosed %s", open)
	}
	closeRound := t.text == ")"
	switch {
	case len(items) == 1:
		if (open == "(") != closeRound {
			p.fail("mismatched brackets")
		}
		return items[0]
	case len(items) == 2 && items[0].kind == vScalar && items[1].kind == vScalar:
		if open == "(" && closeRound {
			return &mval{kind: vPair, elems: items}
		}
		return &mval{kind: vInterval, elems: items, loOpen: open == "(", hiOpen: closeRound}
	case open == "(" && closeRound:
		return &mval{kind: vTuple, elems: items}
	}
	p.fail("bad brackets")
	return nil
}

// onlySymbols reports whether x is made of symbols alone (x, xy, x/y):
// the left side of an assignment.
func onlySymbols(x *expr) bool {
	switch x.kind {
	case eSym:
		return true
	case eMul, eDiv:
		for _, a := range x.args {
			if !onlySymbols(a) {
				return false
			}
		}
		return true
	}
	return false
}
