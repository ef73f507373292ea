// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

// node is a statement of a template body.
type node interface{ nodeLine() int }

// expr is an expression.
type expr interface{ exprNode() }

// =========================================================================
// Statements
// =========================================================================

type textNode struct{ text string }

func (n *textNode) nodeLine() int { return 0 }

// outputNode is {{ expr }} and {% print a, b %}.
type outputNode struct {
	exprs []expr
	line  int
}

func (n *outputNode) nodeLine() int { return n.line }

type ifNode struct {
	tests    []expr // if, elif, elif, ...
	bodies   [][]node
	elseBody []node
	line     int
}

func (n *ifNode) nodeLine() int { return n.line }

// target is an assignment target: a name, a namespace attribute (ns.attr),
// or a tuple of targets.
type target struct {
	name  string
	attr  string // set for ns.attr
	tuple []*target
	isTup bool
}

type forNode struct {
	target    *target
	iter      expr
	filter    expr
	body      []node
	elseBody  []node
	recursive bool
	line      int
}

func (n *forNode) nodeLine() int { return n.line }

type setNode struct {
	target *target
	value  expr
	line   int
}

func (n *setNode) nodeLine() int { return n.line }

// setBlockNode is {% set x [| filters] %}body{% endset %}.
type setBlockNode struct {
	target *target
	filter *filterExpr // input nil: the body
	body   []node
	line   int
}

func (n *setBlockNode) nodeLine() int { return n.line }

// macroDef is the signature and body of a macro or of a call block's caller.
type macroDef struct {
	name     string
	params   []string
	defaults []expr // for the last len(defaults) params
	body     []node
	varargs  bool // the body uses varargs
	kwargs   bool // the body uses kwargs
	caller   bool // the body uses caller
}

type macroNode struct {
	def  *macroDef
	line int
}

func (n *macroNode) nodeLine() int { return n.line }

// callBlockNode is {% call(params) m(args) %}body{% endcall %}, and the
// {% generation %} tag (a call block whose body is rendered as is).
type callBlockNode struct {
	call   *callExpr // nil for generation: the body alone
	caller *macroDef
	line   int
}

func (n *callBlockNode) nodeLine() int { return n.line }

type filterBlockNode struct {
	filter *filterExpr // input nil: the body
	body   []node
	line   int
}

func (n *filterBlockNode) nodeLine() int { return n.line }

// scopeNode is a body with a scope of its own: {% with %} (with its
// assignments) and {% block %}.
type scopeNode struct {
	targets []*target
	values  []expr
	body    []node
	line    int
}

func (n *scopeNode) nodeLine() int { return n.line }

// failNode raises when it is rendered: what Jinja2 parses but cannot run
// here ({% include %}, {% extends %}, {% import %}: there is no loader).
type failNode struct {
	kind, msg string
	line      int
}

func (n *failNode) nodeLine() int { return n.line }

type breakNode struct{ line int }

func (n *breakNode) nodeLine() int { return n.line }

type continueNode struct{ line int }

func (n *continueNode) nodeLine() int { return n.line }

// =========================================================================
// Expressions
// =========================================================================

type constExpr struct{ val Value }

type nameExpr struct{ name string }

type getattrExpr struct {
	obj  expr
	attr string
}

type getitemExpr struct {
	obj expr
	key expr
}

type sliceExpr struct{ start, stop, step expr }

type tupleExpr struct{ items []expr }

type listExpr struct{ items []expr }

type dictExpr struct{ keys, values []expr }

// unaryExpr: op is "not", "-" or "+".
type unaryExpr struct {
	op string
	x  expr
}

// binExpr: op is + - * / // % ** and or.
type binExpr struct {
	op   string
	l, r expr
}

type concatExpr struct{ items []expr }

// compareExpr: a op1 b op2 c ..., ops among == != < <= > >= in notin.
type compareExpr struct {
	first expr
	ops   []string
	rest  []expr
}

type condExpr struct {
	test, then, els expr // els nil: no else
	line            int
}

type kwArg struct {
	name  string
	value expr
}

type callExpr struct {
	fn        expr
	args      []expr
	kwargs    []kwArg
	dynArgs   expr
	dynKwargs expr
}

// filterExpr is input|name(args). A filter block's chain (upper|trim) nests
// as Jinja2's does: the innermost filter's input is nil, the body.
type filterExpr struct {
	input     expr
	name      string
	args      []expr
	kwargs    []kwArg
	dynArgs   expr
	dynKwargs expr
}

type testExpr struct {
	input     expr
	name      string
	args      []expr
	kwargs    []kwArg
	dynArgs   expr
	dynKwargs expr
}

func (*constExpr) exprNode()   {}
func (*nameExpr) exprNode()    {}
func (*getattrExpr) exprNode() {}
func (*getitemExpr) exprNode() {}
func (*sliceExpr) exprNode()   {}
func (*tupleExpr) exprNode()   {}
func (*listExpr) exprNode()    {}
func (*dictExpr) exprNode()    {}
func (*unaryExpr) exprNode()   {}
func (*binExpr) exprNode()     {}
func (*concatExpr) exprNode()  {}
func (*compareExpr) exprNode() {}
func (*condExpr) exprNode()    {}
func (*callExpr) exprNode()    {}
func (*filterExpr) exprNode()  {}
func (*testExpr) exprNode()    {}
