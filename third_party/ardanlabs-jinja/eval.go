// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"errors"
	"strings"
)

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// =============================================================================
// Scope
// =============================================================================

// scope holds the variables of a template level: the template's top level
// (the render data and what it sets), a loop iteration, a macro call, a
// with or set block. Like Jinja2's frames, an inner scope sees its parent's
// variables as they are when it reads them, and what it sets stays in it;
// an if statement has no scope of its own.
type scope struct {
	vars   map[string]Value
	parent *scope
}

func newScope(parent *scope) *scope {
	return &scope{parent: parent}
}

func (s *scope) get(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return Value{}, false
}

func (s *scope) set(name string, val Value) {
	if s.vars == nil {
		s.vars = make(map[string]Value, 4)
	}
	s.vars[name] = val
}

// =============================================================================
// Evaluator
// =============================================================================

// evaluator renders one template: its output buffer (swapped for the bodies
// of macros and blocks) and what the rendering has used of its limits.
type evaluator struct {
	lim   Limits
	out   *strings.Builder
	iters int64
	total int64
	depth int
}

func newEvaluator(lim Limits) *evaluator {
	if lim.MaxCallDepth <= 0 {
		lim.MaxCallDepth = DefaultLimits.MaxCallDepth
	}
	if lim.MaxIterations <= 0 {
		lim.MaxIterations = DefaultLimits.MaxIterations
	}
	if lim.MaxStringBytes <= 0 {
		lim.MaxStringBytes = DefaultLimits.MaxStringBytes
	}
	if lim.MaxTotalBytes <= 0 {
		lim.MaxTotalBytes = DefaultLimits.MaxTotalBytes
	}
	if lim.MaxItems <= 0 {
		lim.MaxItems = DefaultLimits.MaxItems
	}
	return &evaluator{lim: lim, out: &strings.Builder{}}
}

func limitError(format string, args ...any) error {
	return errorf("LimitError", format, args...)
}

// step counts n iterations or produced items against MaxIterations.
func (e *evaluator) step(n int) error {
	e.iters += int64(n)
	if e.iters > e.lim.MaxIterations {
		return limitError("the rendering takes more than %d loop iterations (Limits.MaxIterations)", e.lim.MaxIterations)
	}
	return nil
}

// grow checks a string of n bytes about to be built against MaxStringBytes
// and MaxTotalBytes.
func (e *evaluator) grow(n int) error {
	if n > e.lim.MaxStringBytes {
		return limitError("the rendering builds a string of more than %d bytes (Limits.MaxStringBytes)", e.lim.MaxStringBytes)
	}
	e.total += int64(n)
	if e.total > e.lim.MaxTotalBytes {
		return limitError("the rendering builds more than %d bytes of strings in all (Limits.MaxTotalBytes)", e.lim.MaxTotalBytes)
	}
	return nil
}

// items checks a list of n items about to be built against MaxItems.
func (e *evaluator) items(n int) error {
	if n > e.lim.MaxItems {
		return limitError("the rendering builds a list of more than %d items (Limits.MaxItems)", e.lim.MaxItems)
	}
	return e.step(n)
}

func (e *evaluator) write(s string) error {
	if e.out.Len()+len(s) > e.lim.MaxStringBytes {
		return limitError("the rendering builds a string of more than %d bytes (Limits.MaxStringBytes)", e.lim.MaxStringBytes)
	}
	e.total += int64(len(s))
	if e.total > e.lim.MaxTotalBytes {
		return limitError("the rendering builds more than %d bytes of strings in all (Limits.MaxTotalBytes)", e.lim.MaxTotalBytes)
	}
	e.out.WriteString(s)
	return nil
}

// enterCall counts a nested call against MaxCallDepth.
func (e *evaluator) enterCall() error {
	e.depth++
	if e.depth > e.lim.MaxCallDepth {
		e.depth--
		return limitError("the rendering nests more than %d calls (Limits.MaxCallDepth)", e.lim.MaxCallDepth)
	}
	return nil
}

func (e *evaluator) leaveCall() { e.depth-- }

// capture renders body in sc into a string of its own.
func (e *evaluator) capture(body []node, sc *scope) (string, error) {
	saved := e.out
	e.out = &strings.Builder{}
	err := e.execBody(body, sc)
	s := e.out.String()
	e.out = saved
	return s, err
}

// withLine sets the template line of an error that has none.
func withLine(err error, line int) error {
	if err == nil || err == errBreak || err == errContinue || line <= 0 {
		return err
	}
	var te *Error
	if errors.As(err, &te) {
		if te.Line == 0 {
			te.Line = line
		}
		return err
	}
	return &Error{Kind: "Error", Msg: err.Error(), Line: line}
}

func (e *evaluator) execBody(nodes []node, sc *scope) error {
	for _, n := range nodes {
		if err := e.exec(n, sc); err != nil {
			return withLine(err, n.nodeLine())
		}
	}
	return nil
}

func (e *evaluator) exec(n node, sc *scope) error {
	switch nd := n.(type) {
	case *textNode:
		return e.write(nd.text)

	case *outputNode:
		for _, x := range nd.exprs {
			v, err := e.eval(x, sc)
			if err != nil {
				return err
			}
			s, err := e.str(v)
			if err != nil {
				return err
			}
			if err := e.write(s); err != nil {
				return err
			}
		}
		return nil

	case *ifNode:
		for i, t := range nd.tests {
			v, err := e.eval(t, sc)
			if err != nil {
				return err
			}
			if v.IsTruthy() {
				return e.execBody(nd.bodies[i], sc)
			}
		}
		return e.execBody(nd.elseBody, sc)

	case *forNode:
		iter, err := e.eval(nd.iter, sc)
		if err != nil {
			return err
		}
		items, err := e.iterate(iter)
		if err != nil {
			return err
		}
		_, err = e.loop(nd, items, sc, 0, false)
		return err

	case *setNode:
		v, err := e.eval(nd.value, sc)
		if err != nil {
			return err
		}
		return e.assign(nd.target, v, sc, sc)

	case *setBlockNode:
		if err := e.enterCall(); err != nil {
			return err
		}
		s, err := e.capture(nd.body, newScope(sc))
		e.leaveCall()
		if err != nil {
			return err
		}
		v := NewString(s)
		if nd.filter != nil {
			if v, err = e.evalFilter(nd.filter, sc, &v); err != nil {
				return err
			}
		}
		return e.assign(nd.target, v, sc, sc)

	case *macroNode:
		sc.set(nd.def.name, e.macro(nd.def, sc))
		return nil

	case *callBlockNode:
		caller := e.macro(nd.caller, sc)
		var v Value
		var err error
		if nd.call == nil {
			v, err = e.call(caller, nil, nil)
		} else {
			v, err = e.evalCall(nd.call, sc, &caller)
		}
		if err != nil {
			return err
		}
		s, err := e.str(v)
		if err != nil {
			return err
		}
		return e.write(s)

	case *filterBlockNode:
		if err := e.enterCall(); err != nil {
			return err
		}
		s, err := e.capture(nd.body, newScope(sc))
		e.leaveCall()
		if err != nil {
			return err
		}
		in := NewString(s)
		v, err := e.evalFilter(nd.filter, sc, &in)
		if err != nil {
			return err
		}
		if s, err = e.str(v); err != nil {
			return err
		}
		return e.write(s)

	case *scopeNode:
		inner := newScope(sc)
		for i, t := range nd.targets {
			v, err := e.eval(nd.values[i], sc)
			if err != nil {
				return err
			}
			if err := e.assign(t, v, inner, sc); err != nil {
				return err
			}
		}
		if err := e.enterCall(); err != nil {
			return err
		}
		defer e.leaveCall()
		return e.execBody(nd.body, inner)

	case *failNode:
		return errorf(nd.kind, "%s", nd.msg)

	case *breakNode:
		return errBreak

	case *continueNode:
		return errContinue
	}
	return errorf("RuntimeError", "unknown node %T", n)
}

// assign binds a target in sc; lookup is where a namespace is looked up.
func (e *evaluator) assign(t *target, v Value, sc, lookup *scope) error {
	switch {
	case t.attr != "":
		ns, _ := lookup.get(t.name)
		obj, ok := ns.v.(*Object)
		if ns.kind != KindObject || !ok || !obj.settable {
			return errorf("TemplateRuntimeError", "cannot assign attribute on non-namespace object")
		}
		obj.Attrs.Set(t.attr, v)
		return nil
	case t.isTup:
		items, err := e.iterate(v)
		if err != nil {
			if v.kind == KindUndefined {
				return err
			}
			return errorf("TypeError", "cannot unpack non-iterable %s object", typeName(v))
		}
		if len(items) > len(t.tuple) {
			return errorf("ValueError", "too many values to unpack (expected %d)", len(t.tuple))
		}
		if len(items) < len(t.tuple) {
			return errorf("ValueError", "not enough values to unpack (expected %d, got %d)", len(t.tuple), len(items))
		}
		for i, sub := range t.tuple {
			if err := e.assign(sub, items[i], sc, lookup); err != nil {
				return err
			}
		}
		return nil
	}
	sc.set(t.name, v)
	return nil
}

// loop runs a for loop over items. A recursive loop's loop(...) calls it
// again one level deeper, rendering into a string of its own.
func (e *evaluator) loop(n *forNode, items []Value, sc *scope, depth0 int, capture bool) (string, error) {
	if n.filter != nil {
		var kept []Value
		fs := newScope(sc)
		for _, item := range items {
			if err := e.step(1); err != nil {
				return "", err
			}
			clear(fs.vars)
			if err := e.assign(n.target, item, fs, sc); err != nil {
				return "", err
			}
			v, err := e.eval(n.filter, fs)
			if err != nil {
				return "", err
			}
			if v.IsTruthy() {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	var saved *strings.Builder
	if capture {
		saved = e.out
		e.out = &strings.Builder{}
		defer func() { e.out = saved }()
	}
	if len(items) == 0 {
		if n.elseBody != nil {
			if err := e.execBody(n.elseBody, newScope(sc)); err != nil {
				return "", err
			}
		}
		if capture {
			return e.out.String(), nil
		}
		return "", nil
	}
	lc := &loopContext{items: items, depth0: depth0}
	loopVal := Value{kind: KindObject, v: lc.object()}
	if n.recursive {
		lc.recurse = func(e *evaluator, args []Value, _ kwargs) (Value, error) {
			if len(args) != 1 {
				return Value{}, errorf("TypeError", "loop() takes exactly one argument (%d given)", len(args))
			}
			sub, err := e.iterate(args[0])
			if err != nil {
				return Value{}, err
			}
			if err := e.enterCall(); err != nil {
				return Value{}, err
			}
			defer e.leaveCall()
			s, err := e.loop(n, sub, sc, depth0+1, true)
			return NewString(s), err
		}
	}
	is := newScope(sc)
	for i, item := range items {
		if err := e.step(1); err != nil {
			return "", err
		}
		lc.i = i
		clear(is.vars)
		if err := e.assign(n.target, item, is, sc); err != nil {
			return "", err
		}
		is.set("loop", loopVal)
		if err := e.execBody(n.body, is); err != nil {
			if err == errBreak {
				break
			}
			if err == errContinue {
				continue
			}
			return "", err
		}
	}
	if capture {
		return e.out.String(), nil
	}
	return "", nil
}

// loopContext is Jinja2's LoopContext: one per loop, advanced each
// iteration.
type loopContext struct {
	items       []Value
	i           int
	depth0      int
	lastChanged []Value
	changedSet  bool
	recurse     func(e *evaluator, args []Value, kw kwargs) (Value, error)
	obj         *Object
}

func (lc *loopContext) object() *Object {
	if lc.obj != nil {
		return lc.obj
	}
	lc.obj = &Object{
		Type: "LoopContext",
		getattr: func(name string) (Value, bool) {
			n := len(lc.items)
			switch name {
			case "index":
				return NewInt(int64(lc.i + 1)), true
			case "index0":
				return NewInt(int64(lc.i)), true
			case "revindex":
				return NewInt(int64(n - lc.i)), true
			case "revindex0":
				return NewInt(int64(n - lc.i - 1)), true
			case "first":
				return NewBool(lc.i == 0), true
			case "last":
				return NewBool(lc.i == n-1), true
			case "length":
				return NewInt(int64(n)), true
			case "depth":
				return NewInt(int64(lc.depth0 + 1)), true
			case "depth0":
				return NewInt(int64(lc.depth0)), true
			case "previtem":
				if lc.i == 0 {
					return undefinedHint("there is no previous item"), true
				}
				return lc.items[lc.i-1], true
			case "nextitem":
				if lc.i+1 >= n {
					return undefinedHint("there is no next item"), true
				}
				return lc.items[lc.i+1], true
			case "cycle":
				return Value{kind: KindCallable, v: Callable{Name: "cycle", call: func(_ *evaluator, args []Value, _ kwargs) (Value, error) {
					if len(args) == 0 {
						return Value{}, errorf("TypeError", "no items for cycling given")
					}
					return args[lc.i%len(args)], nil
				}}}, true
			case "changed":
				return Value{kind: KindCallable, v: Callable{Name: "changed", call: func(e *evaluator, args []Value, _ kwargs) (Value, error) {
					if lc.changedSet && len(args) == len(lc.lastChanged) {
						same := true
						for i := range args {
							if eq, _ := e.equal(args[i], lc.lastChanged[i], 0); !eq {
								same = false
								break
							}
						}
						if same {
							return NewBool(false), nil
						}
					}
					lc.lastChanged = append([]Value(nil), args...)
					lc.changedSet = true
					return NewBool(true), nil
				}}}, true
			}
			return Value{}, false
		},
		repr: func() string {
			return "<LoopContext " + itoa(int64(lc.i+1)) + "/" + itoa(int64(len(lc.items))) + ">"
		},
	}
	lc.obj.call = func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		if lc.recurse == nil {
			return Value{}, errorf("TypeError", "The loop must have the 'recursive' marker to be called recursively.")
		}
		return lc.recurse(e, args, kw)
	}
	return lc.obj
}

// macro makes the callable of a macro (or of a call block's caller)
// defined in sc.
func (e *evaluator) macro(def *macroDef, sc *scope) Value {
	name := def.name
	c := Callable{Name: name, repr: "<Macro " + pyReprString(name) + ">"}
	c.call = func(e *evaluator, args []Value, kw kwargs) (Value, error) {
		if err := e.enterCall(); err != nil {
			return Value{}, err
		}
		defer e.leaveCall()
		ms := newScope(sc)
		np := len(def.params)
		firstDefault := np - len(def.defaults)
		for i, p := range def.params {
			var v Value
			switch {
			case i < len(args):
				v = args[i]
			default:
				if x, ok := kw.pop(p); ok {
					v = x
				} else if i >= firstDefault {
					d, err := e.eval(def.defaults[i-firstDefault], ms)
					if err != nil {
						return Value{}, err
					}
					v = d
				} else {
					v = undefinedHint("parameter " + pyReprString(p) + " was not provided")
				}
			}
			ms.set(p, v)
		}
		if def.caller {
			if c, ok := kw.pop("caller"); ok {
				ms.set("caller", c)
			} else {
				ms.set("caller", undefinedHint("No caller defined"))
			}
		}
		if def.kwargs {
			d := NewDict()
			for _, p := range kw {
				d.AsDict().Set(p.name, p.value)
			}
			ms.set("kwargs", d)
		} else if len(kw) > 0 {
			if _, ok := kw.get("caller"); ok && len(kw) == 1 {
				return Value{}, errorf("TypeError", "macro %s was invoked with two values for the special caller argument. This is most likely a bug.", pyReprString(name))
			}
			return Value{}, errorf("TypeError", "macro %s takes no keyword argument %s", pyReprString(name), pyReprString(kw[0].name))
		}
		if def.varargs {
			var extra []Value
			if len(args) > np {
				extra = append(extra, args[np:]...)
			}
			ms.set("varargs", newTuple(extra))
		} else if len(args) > np {
			return Value{}, errorf("TypeError", "macro %s takes not more than %d argument(s)", pyReprString(name), np)
		}
		s, err := e.capture(def.body, ms)
		if err != nil {
			return Value{}, err
		}
		return NewString(s), nil
	}
	return Value{kind: KindCallable, v: c}
}

// iterate lists what a for loop over v goes through, as Python's iter()
// does; a generator is used up.
func (e *evaluator) iterate(v Value) ([]Value, error) {
	switch v.kind {
	case KindList:
		l := v.v.(*List)
		items := l.Items
		if l.gen {
			l.Items = nil
		}
		return items, nil
	case KindDict:
		d := v.v.(*Dict)
		items := make([]Value, len(d.Keys))
		for i, k := range d.Keys {
			items[i] = d.keyValue(k)
		}
		return items, nil
	case KindString:
		s := v.v.(string)
		items := make([]Value, 0, len(s))
		for _, r := range s {
			items = append(items, NewString(string(r)))
		}
		return items, nil
	case KindUndefined:
		return nil, nil
	}
	return nil, errorf("TypeError", "%s object is not iterable", pyReprString(typeName(v)))
}

// =============================================================================
// Expressions
// =============================================================================

func (e *evaluator) eval(x expr, sc *scope) (Value, error) {
	switch n := x.(type) {
	case *constExpr:
		return n.val, nil

	case *nameExpr:
		if v, ok := sc.get(n.name); ok {
			return v, nil
		}
		if v, ok := globals[n.name]; ok {
			return v, nil
		}
		return undefinedName(n.name), nil

	case *getattrExpr:
		obj, err := e.eval(n.obj, sc)
		if err != nil {
			return Value{}, err
		}
		return e.getattr(obj, n.attr)

	case *getitemExpr:
		obj, err := e.eval(n.obj, sc)
		if err != nil {
			return Value{}, err
		}
		if s, ok := n.key.(*sliceExpr); ok {
			return e.evalSlice(obj, s, sc)
		}
		key, err := e.eval(n.key, sc)
		if err != nil {
			return Value{}, err
		}
		return e.getitem(obj, key)

	case *tupleExpr:
		items, err := e.evalList(n.items, sc)
		if err != nil {
			return Value{}, err
		}
		return newTuple(items), nil

	case *listExpr:
		items, err := e.evalList(n.items, sc)
		if err != nil {
			return Value{}, err
		}
		return NewList(items), nil

	case *dictExpr:
		d := NewDict()
		for i := range n.keys {
			k, err := e.eval(n.keys[i], sc)
			if err != nil {
				return Value{}, err
			}
			v, err := e.eval(n.values[i], sc)
			if err != nil {
				return Value{}, err
			}
			if err := d.AsDict().setKey(k, v); err != nil {
				return Value{}, err
			}
		}
		return d, nil

	case *unaryExpr:
		v, err := e.eval(n.x, sc)
		if err != nil {
			return Value{}, err
		}
		if n.op == "not" {
			return NewBool(!v.IsTruthy()), nil
		}
		return unaryOp(n.op, v)

	case *binExpr:
		l, err := e.eval(n.l, sc)
		if err != nil {
			return Value{}, err
		}
		switch n.op {
		case "and":
			if !l.IsTruthy() {
				return l, nil
			}
			return e.eval(n.r, sc)
		case "or":
			if l.IsTruthy() {
				return l, nil
			}
			return e.eval(n.r, sc)
		}
		r, err := e.eval(n.r, sc)
		if err != nil {
			return Value{}, err
		}
		return e.binOp(n.op, l, r)

	case *concatExpr:
		var b strings.Builder
		for _, item := range n.items {
			v, err := e.eval(item, sc)
			if err != nil {
				return Value{}, err
			}
			s, err := e.str(v)
			if err != nil {
				return Value{}, err
			}
			if err := e.grow(b.Len() + len(s)); err != nil {
				return Value{}, err
			}
			b.WriteString(s)
		}
		return NewString(b.String()), nil

	case *compareExpr:
		l, err := e.eval(n.first, sc)
		if err != nil {
			return Value{}, err
		}
		for i, op := range n.ops {
			r, err := e.eval(n.rest[i], sc)
			if err != nil {
				return Value{}, err
			}
			ok, err := e.compareOp(op, l, r)
			if err != nil {
				return Value{}, err
			}
			if !ok {
				return NewBool(false), nil
			}
			l = r
		}
		return NewBool(true), nil

	case *condExpr:
		t, err := e.eval(n.test, sc)
		if err != nil {
			return Value{}, err
		}
		if t.IsTruthy() {
			return e.eval(n.then, sc)
		}
		if n.els == nil {
			return undefinedHint("the inline if-expression on line " + itoa(int64(n.line)) + " evaluated to false and no else section was defined."), nil
		}
		return e.eval(n.els, sc)

	case *callExpr:
		return e.evalCall(n, sc, nil)

	case *filterExpr:
		return e.evalFilter(n, sc, nil)

	case *testExpr:
		in, err := e.eval(n.input, sc)
		if err != nil {
			return Value{}, err
		}
		t, ok := tests[n.name]
		if !ok {
			return Value{}, errorf("TemplateRuntimeError", "No test named %s.", pyReprString(n.name))
		}
		args, kw, err := e.evalArgs(n.args, n.kwargs, n.dynArgs, n.dynKwargs, sc)
		if err != nil {
			return Value{}, err
		}
		r, err := t(e, in, args, kw)
		if err != nil {
			return Value{}, err
		}
		return NewBool(r), nil

	case *sliceExpr:
		return Value{}, errorf("TemplateSyntaxError", "a slice outside a subscript")
	}
	return Value{}, errorf("RuntimeError", "unknown expression %T", x)
}

func (e *evaluator) evalList(xs []expr, sc *scope) ([]Value, error) {
	items := make([]Value, len(xs))
	for i, x := range xs {
		v, err := e.eval(x, sc)
		if err != nil {
			return nil, err
		}
		items[i] = v
	}
	return items, nil
}

// evalArgs evaluates the arguments of a call, a filter or a test,
// spreading *args and **kwargs.
func (e *evaluator) evalArgs(xs []expr, kws []kwArg, dynArgs, dynKwargs expr, sc *scope) ([]Value, kwargs, error) {
	args, err := e.evalList(xs, sc)
	if err != nil {
		return nil, nil, err
	}
	var kw kwargs
	for _, k := range kws {
		v, err := e.eval(k.value, sc)
		if err != nil {
			return nil, nil, err
		}
		kw = kw.with(k.name, v)
	}
	if dynArgs != nil {
		v, err := e.eval(dynArgs, sc)
		if err != nil {
			return nil, nil, err
		}
		items, err := e.iterate(v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, items...)
	}
	if dynKwargs != nil {
		v, err := e.eval(dynKwargs, sc)
		if err != nil {
			return nil, nil, err
		}
		if v.kind != KindDict {
			if v.kind == KindUndefined {
				return nil, nil, undefinedError(v)
			}
			return nil, nil, errorf("TypeError", "argument after ** must be a mapping, not %s", typeName(v))
		}
		d := v.v.(*Dict)
		for _, k := range d.Keys {
			kw = kw.with(k, d.Data[k])
		}
	}
	return args, kw, nil
}

// evalCall evaluates a call; caller, when set, is passed as the caller
// keyword argument (a call block).
func (e *evaluator) evalCall(n *callExpr, sc *scope, caller *Value) (Value, error) {
	fn, err := e.eval(n.fn, sc)
	if err != nil {
		return Value{}, err
	}
	args, kw, err := e.evalArgs(n.args, n.kwargs, n.dynArgs, n.dynKwargs, sc)
	if err != nil {
		return Value{}, err
	}
	if caller != nil {
		kw = kw.with("caller", *caller)
	}
	return e.call(fn, args, kw)
}

func (e *evaluator) call(fn Value, args []Value, kw kwargs) (Value, error) {
	switch fn.kind {
	case KindCallable:
		c := fn.v.(Callable)
		if c.call != nil {
			return c.call(e, args, kw)
		}
		v, err := c.Fn(args, kw.toMap())
		if err != nil {
			var te *Error
			if !errors.As(err, &te) {
				err = &Error{Kind: "Error", Msg: err.Error()}
			}
		}
		return v, err
	case KindObject:
		if o := fn.v.(*Object); o.call != nil {
			return o.call(e, args, kw)
		}
	case KindUndefined:
		return Value{}, undefinedError(fn)
	}
	return Value{}, errorf("TypeError", "%s object is not callable", pyReprString(typeName(fn)))
}

// evalFilter applies a filter; body, when set, is the input of the
// innermost filter of a filter or set block's chain.
func (e *evaluator) evalFilter(n *filterExpr, sc *scope, body *Value) (Value, error) {
	var in Value
	var err error
	if inner, ok := n.input.(*filterExpr); ok && body != nil {
		in, err = e.evalFilter(inner, sc, body)
	} else if n.input != nil {
		in, err = e.eval(n.input, sc)
	} else if body != nil {
		in = *body
	}
	if err != nil {
		return Value{}, err
	}
	f, ok := filters[n.name]
	if !ok {
		return Value{}, errorf("TemplateRuntimeError", "No filter named %s.", pyReprString(n.name))
	}
	args, kw, err := e.evalArgs(n.args, n.kwargs, n.dynArgs, n.dynKwargs, sc)
	if err != nil {
		return Value{}, err
	}
	return f(e, in, args, kw)
}

// =============================================================================
// Attributes and items
// =============================================================================

func undefinedError(v Value) error {
	msg := v.undefinedMessage()
	if strings.HasPrefix(msg, "access to attribute ") {
		return errorf("SecurityError", "%s", msg)
	}
	return errorf("UndefinedError", "%s", msg)
}

// unsafeUndefined is the sandbox's answer to an attribute it does not allow.
func unsafeUndefined(obj Value, attr string) Value {
	return undefinedHint("access to attribute " + pyReprString(attr) + " of " + pyReprString(typeName(obj)) + " object is unsafe.")
}

// pyAttr is the Python attribute attr of obj (a method, bound to obj), if
// it has one.
func (e *evaluator) pyAttr(obj Value, attr string) (Value, bool) {
	if strings.HasPrefix(attr, "__") {
		return unsafeUndefined(obj, attr), true
	}
	switch obj.kind {
	case KindString:
		return strMethod(obj, attr)
	case KindDict:
		return dictMethod(obj, attr)
	case KindList:
		l := obj.v.(*List)
		for i, f := range l.fields {
			if f == attr && i < len(l.Items) {
				return l.Items[i], true
			}
		}
		return listMethod(obj, attr)
	case KindObject:
		o := obj.v.(*Object)
		if o.getattr != nil {
			return o.getattr(attr)
		}
		if o.Attrs != nil {
			return o.Attrs.Get(attr)
		}
	case KindInt, KindBool:
		switch attr {
		case "real", "numerator":
			return NewInt(toInt(obj)), true
		case "imag":
			return NewInt(0), true
		case "denominator":
			return NewInt(1), true
		}
	case KindFloat:
		switch attr {
		case "real":
			return obj, true
		case "imag":
			return NewFloat(0), true
		}
	}
	return Value{}, false
}

// getattr is obj.attr: the Python attribute, else the item, else undefined
// (Jinja2's sandboxed Environment.getattr).
func (e *evaluator) getattr(obj Value, attr string) (Value, error) {
	if obj.kind == KindUndefined {
		return Value{}, undefinedError(obj)
	}
	if v, ok := e.pyAttr(obj, attr); ok {
		return v, nil
	}
	if obj.kind == KindDict {
		if v, ok := obj.v.(*Dict).Get(attr); ok {
			return v, nil
		}
	}
	return undefinedItem(obj, NewString(attr)), nil
}

// getitem is obj[key]: the item, else for a string key the Python
// attribute, else undefined (Jinja2's sandboxed Environment.getitem).
func (e *evaluator) getitem(obj, key Value) (Value, error) {
	switch obj.kind {
	case KindUndefined:
		return Value{}, undefinedError(obj)
	case KindDict:
		if ks, err := hashKey(key); err == nil {
			if v, ok := obj.v.(*Dict).Get(ks); ok {
				return v, nil
			}
		}
	case KindList:
		l := obj.v.(*List)
		if !l.gen && l.view == "" && (key.kind == KindInt || key.kind == KindBool) {
			i := toInt(key)
			if i < 0 {
				i += int64(len(l.Items))
			}
			if i >= 0 && i < int64(len(l.Items)) {
				return l.Items[i], nil
			}
		}
	case KindString:
		if key.kind == KindInt || key.kind == KindBool {
			r := []rune(obj.v.(string))
			i := toInt(key)
			if i < 0 {
				i += int64(len(r))
			}
			if i >= 0 && i < int64(len(r)) {
				return Value{kind: KindString, safe: obj.safe, v: string(r[i])}, nil
			}
		}
	}
	if key.kind == KindString {
		if v, ok := e.pyAttr(obj, key.v.(string)); ok {
			return v, nil
		}
	}
	return undefinedItem(obj, key), nil
}

func (e *evaluator) evalSlice(obj Value, s *sliceExpr, sc *scope) (Value, error) {
	var bounds [3]*int64
	for i, x := range []expr{s.start, s.stop, s.step} {
		if x == nil {
			continue
		}
		v, err := e.eval(x, sc)
		if err != nil {
			return Value{}, err
		}
		switch v.kind {
		case KindNone:
		case KindInt, KindBool:
			n := toInt(v)
			bounds[i] = &n
		case KindUndefined:
			return Value{}, undefinedError(v)
		default:
			if obj.kind == KindUndefined {
				return Value{}, undefinedError(obj)
			}
			return undefinedItem(obj, v), nil // a TypeError, caught by getitem
		}
	}
	if bounds[2] != nil && *bounds[2] == 0 {
		if obj.kind == KindUndefined {
			return Value{}, undefinedError(obj)
		}
		return Value{}, errorf("ValueError", "slice step cannot be zero")
	}
	switch obj.kind {
	case KindUndefined:
		return Value{}, undefinedError(obj)
	case KindString:
		s := obj.v.(string)
		r := []rune(s)
		idx := sliceIndices(len(r), bounds)
		out := make([]rune, 0, len(idx))
		for _, i := range idx {
			out = append(out, r[i])
		}
		return Value{kind: KindString, safe: obj.safe, v: string(out)}, nil
	case KindList:
		l := obj.v.(*List)
		if l.gen || l.view != "" {
			break
		}
		idx := sliceIndices(len(l.Items), bounds)
		items := make([]Value, len(idx))
		for k, i := range idx {
			items[k] = l.Items[i]
		}
		return Value{kind: KindList, v: &List{Items: items, Tuple: l.Tuple}}, nil
	}
	return undefinedItem(obj, NewString("slice")), nil
}

// sliceIndices lists the indices of seq[start:stop:step] for a sequence of
// length n, as CPython's PySlice_AdjustIndices does.
func sliceIndices(n int, b [3]*int64) []int {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	ln := int64(n)
	var start, stop int64
	if step > 0 {
		start, stop = 0, ln
	} else {
		start, stop = ln-1, -1
	}
	adjust := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += ln
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		} else if v >= ln {
			if step < 0 {
				return ln - 1
			}
			return ln
		}
		return v
	}
	start = adjust(b[0], start)
	stop = adjust(b[1], stop)
	var idx []int
	if step > 0 {
		for i := start; i < stop; i += step {
			idx = append(idx, int(i))
		}
	} else {
		for i := start; i > stop; i += step {
			idx = append(idx, int(i))
		}
	}
	return idx
}
