// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"fmt"
)

// Template is a compiled Jinja template ready for rendering.
type Template struct {
	nodes []node
	src   string
}

// Limits bound what one rendering may do. A template is data (it comes with
// a model download): no template may make a render run for ever, grow
// memory without bound, or overflow the stack, so each of these is an error
// that names the limit instead. The defaults are far above what any real
// chat template needs.
type Limits struct {
	// MaxCallDepth bounds nested calls of macros, caller() and recursive
	// loops.
	MaxCallDepth int
	// MaxIterations bounds the loop iterations of a rendering, with the
	// items that filters and operators produce.
	MaxIterations int64
	// MaxStringBytes bounds every string a rendering builds, and its
	// output.
	MaxStringBytes int
	// MaxTotalBytes bounds the bytes of all the strings a rendering builds
	// together (what building them costs in time).
	MaxTotalBytes int64
	// MaxItems bounds the length of every list a rendering builds.
	MaxItems int
}

// DefaultLimits are the limits of Render and RenderValues.
var DefaultLimits = Limits{
	MaxCallDepth:   256,
	MaxIterations:  10_000_000,
	MaxStringBytes: 16 << 20,
	MaxTotalBytes:  4 << 30,
	MaxItems:       1 << 20,
}

// maxParseDepth bounds how deeply a template's blocks and expressions nest
// (each block, parenthesis, operator or filter of a chain counts), so that
// parsing and rendering stay far from the stack's limit; maxNesting bounds
// how deeply values nest when they are printed, compared or encoded (about
// where Python's recursion limit stops Jinja2).
const (
	maxParseDepth = 1000
	maxNesting    = 1000
)

// Error is an error raised by a template: a syntax error when compiling,
// or, when rendering, what Jinja2 would raise (Kind is the Python exception's
// name: UndefinedError, TypeError, TemplateError for raise_exception, ...) or
// a limit that was reached (LimitError). Line is the template's line, 0 when
// unknown.
type Error struct {
	Kind string
	Msg  string
	Line int
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Kind, e.Msg)
	}
	return e.Kind + ": " + e.Msg
}

// Compile parses a Jinja template source string and returns a compiled
// template that can be rendered multiple times with different data.
func Compile(source string) (*Template, error) {
	toks, err := lex(source)
	if err != nil {
		return nil, fmt.Errorf("jinja: %w", err)
	}
	nodes, err := parse(toks)
	if err != nil {
		return nil, fmt.Errorf("jinja: %w", err)
	}
	return &Template{nodes: nodes, src: source}, nil
}

// Render executes the template with the provided data and returns the
// rendered string. Each call creates an isolated scope so templates are
// safe to render concurrently after compilation.
func (t *Template) Render(data map[string]any) (string, error) {
	vals := make(map[string]Value, len(data))
	for k, v := range data {
		vals[k] = FromGoValue(v)
	}
	return t.RenderLimits(vals, DefaultLimits)
}

// RenderValues is like Render but accepts pre-converted Value data.
func (t *Template) RenderValues(data map[string]Value) (string, error) {
	return t.RenderLimits(data, DefaultLimits)
}

// RenderLimits is RenderValues with limits of the caller's.
func (t *Template) RenderLimits(data map[string]Value, lim Limits) (string, error) {
	e := newEvaluator(lim)
	root := newScope(nil)
	for k, v := range data {
		root.set(k, v)
	}
	if err := e.execBody(t.nodes, root); err != nil {
		if err == errBreak || err == errContinue {
			return "", errorf("TemplateSyntaxError", "break or continue outside a loop")
		}
		return "", err
	}
	return e.out.String(), nil
}
