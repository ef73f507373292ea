// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"slices"
	"strings"
)

// The parser follows Jinja2's (jinja2/parser.py): the same grammar and
// operator precedence (from loosest: the inline if, or, and, not,
// comparisons and in, + and -, ~, * / // %, **, unary - and +, then
// filters, tests and calls on a primary), and the same statements: if, for
// (with its filter, else and recursive), set (targets, tuples, namespace
// attributes, blocks with filters), macro, call, filter, with, block,
// print, raw, break and continue (loopcontrols) and transformers'
// generation tag. include, import, from and extends parse and fail when
// rendered: templates here have no loader.

type parser struct {
	toks   []token
	pos    int
	depth  int
	links  int // links of the chain being parsed (chain, link)
	inLoop int
}

func parse(toks []token) ([]node, error) {
	p := &parser{toks: toks}
	body, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if t := p.cur(); t.typ != tEOF {
		return nil, syntaxError(t.line, "unexpected %s", pyReprString(t.describe()))
	}
	if err := checkNames(body, false); err != nil {
		return nil, err
	}
	return body, nil
}

func (p *parser) cur() token { return p.toks[p.pos] }

func (p *parser) look() token {
	if p.pos+1 < len(p.toks) {
		return p.toks[p.pos+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.typ == tOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.typ == tName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) fail(t token, format string, args ...any) error {
	return syntaxError(t.line, format, args...)
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		t := p.cur()
		if t.typ == tEOF {
			return p.fail(t, "unexpected end of template, expected '%s'.", op)
		}
		return p.fail(t, "expected token '%s', got '%s'", op, t.describe())
	}
	return nil
}

func (p *parser) expectType(typ tokType, what string) (token, error) {
	t := p.cur()
	if t.typ != typ {
		if t.typ == tEOF {
			return t, p.fail(t, "unexpected end of template, expected '%s'.", what)
		}
		return t, p.fail(t, "expected token '%s', got '%s'", what, t.describe())
	}
	return p.next(), nil
}

func (p *parser) expectName(name string) error {
	if !p.skipName(name) {
		t := p.cur()
		return p.fail(t, "expected token '%s', got '%s'", name, t.describe())
	}
	return nil
}

// enter counts one level of nesting; every recursive step of the parser
// goes through it, so that no template overflows the stack.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.fail(p.cur(), "the template nests more than %d levels deep", maxParseDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// chain starts counting the links of an operator, filter or subscript
// chain (a + b + c, x|f|g, a.b[c]()), which nest as deeply as they are
// long; the function it returns, deferred, uncounts them.
func (p *parser) chain() func() {
	links := &p.links
	saved := *links
	*links = 0
	return func() {
		p.depth -= *links
		*links = saved
	}
}

// link counts one link of the current chain as a level of nesting.
func (p *parser) link() error {
	p.links++
	return p.enter()
}

// subparse parses template data, {{ }} and statements until a block
// statement whose name is one of endNames (its name is then the current
// token) or the end of the template.
func (p *parser) subparse(endNames []string) ([]node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.typ {
		case tData:
			p.next()
			body = append(body, &textNode{text: t.val})
		case tVarBegin:
			p.next()
			e, err := p.parseTuple(false, true, nil, false)
			if err != nil {
				return nil, err
			}
			if _, err := p.expectType(tVarEnd, "end of print statement"); err != nil {
				return nil, err
			}
			body = append(body, &outputNode{exprs: []expr{e}, line: t.line})
		case tBlockBegin:
			p.next()
			if endNames != nil && p.cur().typ == tName && slices.Contains(endNames, p.cur().val) {
				return body, nil
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, err
			}
			if n != nil {
				body = append(body, n)
			}
			if _, err := p.expectType(tBlockEnd, "end of statement block"); err != nil {
				return nil, err
			}
		case tEOF:
			return body, nil
		default:
			return nil, p.fail(t, "unexpected %s", pyReprString(t.describe()))
		}
	}
}

// parseStatements parses the end of a block's opening tag and its body up
// to one of endNames, which is consumed with dropNeedle.
func (p *parser) parseStatements(endNames []string, dropNeedle bool) ([]node, error) {
	p.skipOp(":")
	if _, err := p.expectType(tBlockEnd, "end of statement block"); err != nil {
		return nil, err
	}
	body, err := p.subparse(endNames)
	if err != nil {
		return nil, err
	}
	if t := p.cur(); t.typ == tEOF {
		names := make([]string, len(endNames))
		for i, n := range endNames {
			names[i] = "'" + n + "'"
		}
		return nil, p.fail(t, "Unexpected end of template. Jinja was looking for the following tags: %s.", strings.Join(names, " or "))
	}
	if dropNeedle {
		p.next()
	}
	return body, nil
}

func (p *parser) parseStatement() (node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	if t.typ != tName {
		return nil, p.fail(t, "tag name expected")
	}
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "block":
		return p.parseBlock()
	case "print":
		p.next()
		n := &outputNode{line: t.line}
		for p.cur().typ != tBlockEnd {
			if len(n.exprs) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			e, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			n.exprs = append(n.exprs, e)
		}
		return n, nil
	case "break", "continue":
		p.next()
		if p.inLoop == 0 {
			return nil, p.fail(t, "'%s' outside loop", t.val)
		}
		if t.val == "break" {
			return &breakNode{line: t.line}, nil
		}
		return &continueNode{line: t.line}, nil
	case "generation":
		p.next()
		inLoop := p.inLoop
		p.inLoop = 0
		body, err := p.parseStatements([]string{"endgeneration"}, true)
		p.inLoop = inLoop
		if err != nil {
			return nil, err
		}
		return &callBlockNode{caller: &macroDef{name: "caller", body: body}, line: t.line}, nil
	case "include", "import", "from", "extends":
		p.next()
		for p.cur().typ != tBlockEnd && p.cur().typ != tEOF {
			p.next()
		}
		return &failNode{kind: "TypeError", msg: "no loader for this environment specified", line: t.line}, nil
	}
	return nil, p.fail(t, "Encountered unknown tag %s.", pyReprString(t.val))
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{line: p.next().line}
	for {
		test, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return nil, err
		}
		body, err := p.parseStatements([]string{"elif", "else", "endif"}, false)
		if err != nil {
			return nil, err
		}
		n.tests = append(n.tests, test)
		n.bodies = append(n.bodies, body)
		t := p.next()
		if t.val == "elif" {
			continue
		}
		if t.val == "else" {
			if n.elseBody, err = p.parseStatements([]string{"endif"}, true); err != nil {
				return nil, err
			}
			if n.elseBody == nil {
				n.elseBody = []node{}
			}
		}
		return n, nil
	}
}

func (p *parser) parseFor() (node, error) {
	n := &forNode{line: p.next().line}
	var err error
	if n.target, err = p.parseAssignTarget(false, []string{"in"}); err != nil {
		return nil, err
	}
	if err := p.expectName("in"); err != nil {
		return nil, err
	}
	if n.iter, err = p.parseTuple(false, false, []string{"recursive"}, false); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if n.filter, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	n.recursive = p.skipName("recursive")
	p.inLoop++
	n.body, err = p.parseStatements([]string{"endfor", "else"}, false)
	p.inLoop--
	if err != nil {
		return nil, err
	}
	if p.next().val == "else" {
		if n.elseBody, err = p.parseStatements([]string{"endfor"}, true); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// parseAssignTarget parses what set, for and with assign to.
func (p *parser) parseAssignTarget(withNamespace bool, extraEnd []string) (*target, error) {
	t := p.cur()
	if withNamespace && t.typ == tName && p.look().typ == tOp && p.look().val == "." {
		p.next()
		p.next()
		attr, err := p.expectType(tName, "name")
		if err != nil {
			return nil, err
		}
		return &target{name: t.val, attr: attr.val}, nil
	}
	e, err := p.parseTuple(true, false, extraEnd, false)
	if err != nil {
		return nil, err
	}
	return toTarget(p, t, e)
}

func toTarget(p *parser, t token, e expr) (*target, error) {
	switch x := e.(type) {
	case *nameExpr:
		switch x.name {
		case "true", "false", "none", "True", "False", "None":
			return nil, p.fail(t, "cannot assign to %s", x.name)
		}
		return &target{name: x.name}, nil
	case *tupleExpr:
		tg := &target{isTup: true}
		for _, item := range x.items {
			sub, err := toTarget(p, t, item)
			if err != nil {
				return nil, err
			}
			tg.tuple = append(tg.tuple, sub)
		}
		return tg, nil
	}
	return nil, p.fail(t, "can't assign to %s", pyReprString(exprKind(e)))
}

func exprKind(e expr) string {
	switch e.(type) {
	case *constExpr:
		return "const"
	case *listExpr:
		return "list"
	case *dictExpr:
		return "dict"
	case *callExpr:
		return "call"
	case *getattrExpr:
		return "getattr"
	case *getitemExpr:
		return "getitem"
	}
	return "expression"
}

func (p *parser) parseSet() (node, error) {
	line := p.next().line
	tg, err := p.parseAssignTarget(true, nil)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		value, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setNode{target: tg, value: value, line: line}, nil
	}
	n := &setBlockNode{target: tg, line: line}
	if p.isOp("|") {
		f, err := p.parseFilter(nil, false)
		if err != nil {
			return nil, err
		}
		n.filter = f.(*filterExpr)
	}
	inLoop := p.inLoop
	p.inLoop = 0
	n.body, err = p.parseStatements([]string{"endset"}, true)
	p.inLoop = inLoop
	if err != nil {
		return nil, err
	}
	return n, nil
}

// parseSignature parses a macro's or a caller's parameter list.
func (p *parser) parseSignature(def *macroDef) error {
	if err := p.expectOp("("); err != nil {
		return err
	}
	for !p.isOp(")") {
		if len(def.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
		}
		t, err := p.expectType(tName, "name")
		if err != nil {
			return err
		}
		def.params = append(def.params, t.val)
		if p.skipOp("=") {
			d, err := p.parseExpression(true)
			if err != nil {
				return err
			}
			def.defaults = append(def.defaults, d)
		} else if len(def.defaults) > 0 {
			return p.fail(t, "non-default argument follows default argument")
		}
	}
	return p.expectOp(")")
}

func (p *parser) macroBody(def *macroDef, end string) error {
	inLoop := p.inLoop
	p.inLoop = 0
	body, err := p.parseStatements([]string{end}, true)
	p.inLoop = inLoop
	if err != nil {
		return err
	}
	def.body = body
	def.varargs = usesName(body, "varargs")
	def.kwargs = usesName(body, "kwargs")
	def.caller = usesName(body, "caller")
	return nil
}

func (p *parser) parseMacro() (node, error) {
	line := p.next().line
	name, err := p.expectType(tName, "name")
	if err != nil {
		return nil, err
	}
	def := &macroDef{name: name.val}
	if err := p.parseSignature(def); err != nil {
		return nil, err
	}
	if err := p.macroBody(def, "endmacro"); err != nil {
		return nil, err
	}
	return &macroNode{def: def, line: line}, nil
}

func (p *parser) parseCallBlock() (node, error) {
	t := p.next()
	def := &macroDef{name: "caller"}
	if p.isOp("(") {
		if err := p.parseSignature(def); err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.fail(t, "expected call")
	}
	if err := p.macroBody(def, "endcall"); err != nil {
		return nil, err
	}
	return &callBlockNode{call: call, caller: def, line: t.line}, nil
}

func (p *parser) parseFilterBlock() (node, error) {
	line := p.next().line
	f, err := p.parseFilter(nil, true)
	if err != nil {
		return nil, err
	}
	inLoop := p.inLoop
	p.inLoop = 0
	body, err := p.parseStatements([]string{"endfilter"}, true)
	p.inLoop = inLoop
	if err != nil {
		return nil, err
	}
	return &filterBlockNode{filter: f.(*filterExpr), body: body, line: line}, nil
}

func (p *parser) parseWith() (node, error) {
	n := &scopeNode{line: p.next().line}
	for p.cur().typ != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		tg, err := p.parseAssignTarget(false, nil)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, tg)
		n.values = append(n.values, v)
	}
	var err error
	n.body, err = p.parseStatements([]string{"endwith"}, true)
	return n, err
}

func (p *parser) parseBlock() (node, error) {
	n := &scopeNode{line: p.next().line}
	name, err := p.expectType(tName, "name")
	if err != nil {
		return nil, err
	}
	p.skipName("scoped")
	p.skipName("required")
	inLoop := p.inLoop
	p.inLoop = 0
	n.body, err = p.parseStatements([]string{"endblock"}, true)
	p.inLoop = inLoop
	if err != nil {
		return nil, err
	}
	if t := p.cur(); t.typ == tName {
		if t.val != name.val {
			return nil, p.fail(t, "mismatching name: %s", pyReprString(t.val))
		}
		p.next()
	}
	return n, nil
}

// =========================================================================
// Expressions
// =========================================================================

func (p *parser) isTupleEnd(extraEnd []string) bool {
	t := p.cur()
	switch t.typ {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")"
	}
	// Jinja2 3.1 passes its extra end rules to Token.test_any as one
	// tuple, so that they never match (a "for a, in x" fails to parse):
	// extraEnd is ignored to fail the same way.
	return false
}

// parseTuple parses one expression or a tuple of them (a, b).
// simplified: primaries only (assignment targets).
func (p *parser) parseTuple(simplified, withCondexpr bool, extraEnd []string, explicitParens bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		var e expr
		var err error
		if simplified {
			e, err = p.parsePrimary()
		} else {
			e, err = p.parseExpression(withCondexpr)
		}
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.fail(p.cur(), "Expected an expression, got '%s'", p.cur().describe())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) parseExpression(withCondexpr bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if withCondexpr {
		return p.parseCondexpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondexpr() (expr, error) {
	line := p.cur().line
	e1, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var e3 expr
		if p.skipName("else") {
			if e3, err = p.parseCondexpr(); err != nil {
				return nil, err
			}
		}
		e1 = &condExpr{test: test, then: e1, els: e3, line: line}
		line = p.cur().line
	}
	return e1, nil
}

func (p *parser) parseOr() (expr, error) {
	left, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	defer p.chain()()
	for p.skipName("or") {
		if err := p.link(); err != nil {
			return nil, err
		}
		right, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		left = &binExpr{op: "or", l: left, r: right}
	}
	return left, nil
}

func (p *parser) parseAnd() (expr, error) {
	left, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	defer p.chain()()
	for p.skipName("and") {
		if err := p.link(); err != nil {
			return nil, err
		}
		right, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		left = &binExpr{op: "and", l: left, r: right}
	}
	return left, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", x: x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []string
	var rest []expr
	for {
		t := p.cur()
		op := ""
		switch {
		case t.typ == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.look().typ == tName && p.look().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
		rest = append(rest, r)
	}
	if len(ops) == 0 {
		return first, nil
	}
	return &compareExpr{first: first, ops: ops, rest: rest}, nil
}

func (p *parser) parseMath1() (expr, error) {
	left, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	defer p.chain()()
	for p.isOp("+") || p.isOp("-") {
		if err := p.link(); err != nil {
			return nil, err
		}
		op := p.next().val
		right, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		left = &binExpr{op: op, l: left, r: right}
	}
	return left, nil
}

func (p *parser) parseConcat() (expr, error) {
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	items := []expr{first}
	for p.skipOp("~") {
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if len(items) == 1 {
		return first, nil
	}
	return &concatExpr{items: items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	left, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	defer p.chain()()
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		if err := p.link(); err != nil {
			return nil, err
		}
		op := p.next().val
		right, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		left = &binExpr{op: op, l: left, r: right}
	}
	return left, nil
}

func (p *parser) parsePow() (expr, error) {
	left, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	defer p.chain()()
	for p.skipOp("**") {
		if err := p.link(); err != nil {
			return nil, err
		}
		right, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		left = &binExpr{op: "**", l: left, r: right}
	}
	return left, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	switch {
	case p.isOp("-"), p.isOp("+"):
		op := p.next().val
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: op, x: x}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	switch t.typ {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{val: NewBool(true)}, nil
		case "false", "False":
			return &constExpr{val: NewBool(false)}, nil
		case "none", "None":
			return &constExpr{val: None()}, nil
		}
		return &nameExpr{name: t.val}, nil
	case tString:
		p.next()
		s := t.val
		for p.cur().typ == tString {
			s += p.next().val
		}
		return &constExpr{val: NewString(s)}, nil
	case tInt, tFloat:
		p.next()
		return &constExpr{val: t.num}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			e, err := p.parseTuple(false, true, nil, true)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "[":
			p.next()
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				if p.isOp("]") {
					break
				}
				e, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
			}
			return l, p.expectOp("]")
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				if p.isOp("}") {
					break
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.values = append(d.values, v)
			}
			return d, p.expectOp("}")
		}
	case tEOF:
		return nil, p.fail(t, "unexpected end of template")
	}
	return nil, p.fail(t, "unexpected %s", pyReprString(t.describe()))
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	defer p.chain()()
	for {
		if err := p.link(); err != nil {
			return nil, err
		}
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			e, err = p.parseSubscript(e)
		case p.isOp("("):
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	defer p.chain()()
	for {
		if err := p.link(); err != nil {
			return nil, err
		}
		var err error
		switch {
		case p.isOp("|"):
			e, err = p.parseFilter(e, false)
		case p.isName("is"):
			e, err = p.parseTest(e)
		case p.isOp("("):
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(e expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.next()
		switch a.typ {
		case tName:
			return &getattrExpr{obj: e, attr: a.val}, nil
		case tInt:
			return &getitemExpr{obj: e, key: &constExpr{val: a.num}}, nil
		}
		return nil, p.fail(a, "expected name or number")
	}
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	if err := p.expectOp("]"); err != nil {
		return nil, err
	}
	if len(args) == 1 {
		return &getitemExpr{obj: e, key: args[0]}, nil
	}
	return &getitemExpr{obj: e, key: &tupleExpr{items: args}}, nil
}

func (p *parser) parseSubscribed() (expr, error) {
	var s sliceExpr
	if p.isOp(":") {
		p.next()
	} else {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		p.next()
		s.start = e
	}
	if !p.isOp(":") && !p.isOp("]") && !p.isOp(",") {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		s.stop = e
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			e, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			s.step = e
		}
	}
	return &s, nil
}

// callArgs are the arguments of a call, a filter or a test.
type callArgs struct {
	args      []expr
	kwargs    []kwArg
	dynArgs   expr
	dynKwargs expr
}

func (p *parser) parseCallArgs() (callArgs, error) {
	var a callArgs
	open, err := p.expectType(tOp, "(")
	if err != nil {
		return a, err
	}
	bad := func() error { return p.fail(open, "invalid syntax for function call expression") }
	requireComma := false
	for !p.isOp(")") {
		if requireComma {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*"):
			if a.dynArgs != nil || a.dynKwargs != nil {
				return a, bad()
			}
			p.next()
			if a.dynArgs, err = p.parseExpression(true); err != nil {
				return a, err
			}
		case p.isOp("**"):
			if a.dynKwargs != nil {
				return a, bad()
			}
			p.next()
			if a.dynKwargs, err = p.parseExpression(true); err != nil {
				return a, err
			}
		case p.cur().typ == tName && p.look().typ == tOp && p.look().val == "=":
			if a.dynKwargs != nil {
				return a, bad()
			}
			key := p.next().val
			p.next()
			v, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.kwargs = append(a.kwargs, kwArg{name: key, value: v})
		default:
			if a.dynArgs != nil || a.dynKwargs != nil || len(a.kwargs) > 0 {
				return a, bad()
			}
			v, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.args = append(a.args, v)
		}
		requireComma = true
	}
	return a, p.expectOp(")")
}

func (p *parser) parseCall(e expr) (expr, error) {
	a, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: e, args: a.args, kwargs: a.kwargs, dynArgs: a.dynArgs, dynKwargs: a.dynKwargs}, nil
}

// parseFilter parses |name(args)|name2... (startInline: the first name
// comes without a pipe, as in {% filter upper %}).
func (p *parser) parseFilter(e expr, startInline bool) (expr, error) {
	defer p.chain()()
	for p.isOp("|") || startInline {
		if err := p.link(); err != nil {
			return nil, err
		}
		if !startInline {
			p.next()
		}
		startInline = false
		t, err := p.expectType(tName, "name")
		if err != nil {
			return nil, err
		}
		name := t.val
		for p.skipOp(".") {
			n, err := p.expectType(tName, "name")
			if err != nil {
				return nil, err
			}
			name += "." + n.val
		}
		f := &filterExpr{input: e, name: name}
		if p.isOp("(") {
			a, err := p.parseCallArgs()
			if err != nil {
				return nil, err
			}
			f.args, f.kwargs, f.dynArgs, f.dynKwargs = a.args, a.kwargs, a.dynArgs, a.dynKwargs
		}
		e = f
	}
	return e, nil
}

func (p *parser) parseTest(e expr) (expr, error) {
	p.next() // is
	negated := p.skipName("not")
	t, err := p.expectType(tName, "name")
	if err != nil {
		return nil, err
	}
	name := t.val
	for p.skipOp(".") {
		n, err := p.expectType(tName, "name")
		if err != nil {
			return nil, err
		}
		name += "." + n.val
	}
	n := &testExpr{input: e, name: name}
	c := p.cur()
	switch {
	case p.isOp("("):
		a, err := p.parseCallArgs()
		if err != nil {
			return nil, err
		}
		n.args, n.kwargs, n.dynArgs, n.dynKwargs = a.args, a.kwargs, a.dynArgs, a.dynKwargs
	case (c.typ == tName || c.typ == tString || c.typ == tInt || c.typ == tFloat || p.isOp("[") || p.isOp("{")) &&
		!(c.typ == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
		if c.typ == tName && c.val == "is" {
			return nil, p.fail(c, "You cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		n.args = []expr{a}
	}
	if negated {
		return &unaryExpr{op: "not", x: n}, nil
	}
	return n, nil
}

// =========================================================================
// Checks after parsing
// =========================================================================

// checkNames fails for a filter or test that does not exist, as Jinja2's
// compiler does, except inside an if statement or an inline if (a soft
// frame), where it fails only when it runs.
func checkNames(body []node, soft bool) error {
	var err error
	walkNodes(body, soft, func(e expr, soft bool, line int) {
		if err != nil || soft {
			return
		}
		switch x := e.(type) {
		case *filterExpr:
			if _, ok := filters[x.name]; !ok {
				err = syntaxError(line, "No filter named %s.", pyReprString(x.name))
			}
		case *testExpr:
			if _, ok := tests[x.name]; !ok {
				err = syntaxError(line, "No test named %s.", pyReprString(x.name))
			}
		}
	})
	return err
}

// usesName reports whether an expression of body reads the variable name.
func usesName(body []node, name string) bool {
	found := false
	walkNodes(body, false, func(e expr, _ bool, _ int) {
		if n, ok := e.(*nameExpr); ok && n.name == name {
			found = true
		}
	})
	return found
}

// walkNodes calls fn on every expression of body, with whether it is in a
// soft frame (an if statement or an inline if, not under a loop, macro or
// block of its own) and its statement's line.
func walkNodes(body []node, soft bool, fn func(e expr, soft bool, line int)) {
	for _, n := range body {
		line := n.nodeLine()
		w := func(e expr, soft bool) { walkExpr(e, soft, line, fn) }
		switch x := n.(type) {
		case *outputNode:
			for _, e := range x.exprs {
				w(e, soft)
			}
		case *ifNode:
			for i, t := range x.tests {
				w(t, true)
				walkNodes(x.bodies[i], true, fn)
			}
			walkNodes(x.elseBody, true, fn)
		case *forNode:
			w(x.iter, soft)
			w(x.filter, false)
			walkNodes(x.body, false, fn)
			walkNodes(x.elseBody, false, fn)
		case *setNode:
			w(x.value, soft)
		case *setBlockNode:
			if x.filter != nil {
				w(x.filter, soft)
			}
			walkNodes(x.body, false, fn)
		case *macroNode:
			for _, d := range x.def.defaults {
				w(d, false)
			}
			walkNodes(x.def.body, false, fn)
		case *callBlockNode:
			if x.call != nil {
				w(x.call, soft)
			}
			for _, d := range x.caller.defaults {
				w(d, false)
			}
			walkNodes(x.caller.body, false, fn)
		case *filterBlockNode:
			w(x.filter, soft)
			walkNodes(x.body, false, fn)
		case *scopeNode:
			for _, v := range x.values {
				w(v, soft)
			}
			walkNodes(x.body, false, fn)
		}
	}
}

func walkExpr(e expr, soft bool, line int, fn func(e expr, soft bool, line int)) {
	if e == nil {
		return
	}
	fn(e, soft, line)
	w := func(e expr) { walkExpr(e, soft, line, fn) }
	ws := func(es []expr) {
		for _, e := range es {
			w(e)
		}
	}
	wk := func(ks []kwArg) {
		for _, k := range ks {
			w(k.value)
		}
	}
	switch x := e.(type) {
	case *getattrExpr:
		w(x.obj)
	case *getitemExpr:
		w(x.obj)
		w(x.key)
	case *sliceExpr:
		w(x.start)
		w(x.stop)
		w(x.step)
	case *tupleExpr:
		ws(x.items)
	case *listExpr:
		ws(x.items)
	case *dictExpr:
		ws(x.keys)
		ws(x.values)
	case *unaryExpr:
		w(x.x)
	case *binExpr:
		w(x.l)
		w(x.r)
	case *concatExpr:
		ws(x.items)
	case *compareExpr:
		w(x.first)
		ws(x.rest)
	case *condExpr:
		walkExpr(x.test, true, line, fn)
		walkExpr(x.then, true, line, fn)
		walkExpr(x.els, true, line, fn)
	case *callExpr:
		w(x.fn)
		ws(x.args)
		wk(x.kwargs)
		w(x.dynArgs)
		w(x.dynKwargs)
	case *filterExpr:
		w(x.input)
		ws(x.args)
		wk(x.kwargs)
		w(x.dynArgs)
		w(x.dynKwargs)
	case *testExpr:
		w(x.input)
		ws(x.args)
		wk(x.kwargs)
		w(x.dynArgs)
		w(x.dynKwargs)
	}
}
