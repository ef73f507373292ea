package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"
)

// override is one --set or STX_ value, placed on top of a recipe.
// CUE has no overrides (unification only narrows), so an override replaces
// the value in the recipe's resolved data, and the result is validated
// against #Recipe again: a bad override is reported like a bad file, at its
// own synthetic position ("--set:2:13", "$STX_LR:1:8").
type override struct {
	recipe string   // "" = every recipe
	path   []string // relative to the recipe
	raw    string
	value  json.RawMessage
	pos    Position
}

func (o override) pathString() string { return strings.Join(o.path, ".") }

// parseOverrides reads Options.Sets and the STX_ environment. Only the
// STX_ variables that are knobs (or in Options.EnvAllow) are stx's: any
// other is the user's shell's business and is ignored, with a warning when
// its name is a near miss of a knob's (STX_TOP_PP for STX_TOP_P), which is
// most likely a typo that would otherwise go unnoticed.
func parseOverrides(ctx *cue.Context, opts Options) ([]override, List, List) {
	var out []override
	var errs, warns List
	for i, s := range opts.Sets {
		path, raw, ok := strings.Cut(s, "=")
		pos := Position{File: "--set", Line: i + 1, Col: len(path) + 2}
		if !ok || strings.TrimSpace(path) == "" {
			errs = append(errs, &Error{Pos: Position{File: "--set", Line: i + 1, Col: 1}, Msg: fmt.Sprintf("%q is not of the form path=value", s)})
			continue
		}
		segs := strings.Split(strings.TrimSpace(path), ".")
		o := override{recipe: opts.Only, path: segs, raw: raw, pos: pos}
		if segs[0] == "recipes" {
			if len(segs) < 3 {
				errs = append(errs, &Error{Pos: Position{File: "--set", Line: i + 1, Col: 1}, Path: path, Msg: "a recipes.NAME path needs a field after the recipe name"})
				continue
			}
			o.recipe, o.path = segs[1], segs[2:]
		}
		if err := o.parse(ctx); err != nil {
			errs = append(errs, &Error{Pos: pos, Path: path, Msg: err.Error()})
			continue
		}
		out = append(out, o)
	}
	known := map[string]string{}
	docs, err := KnobDocs()
	if err != nil {
		return nil, List{{Pos: Position{File: "schema"}, Msg: err.Error()}}, nil
	}
	for _, k := range docs {
		if env := k.Env(); env != "" {
			known[env] = k.Name
		}
	}
	allowed := map[string]bool{}
	for _, a := range opts.EnvAllow {
		allowed[a] = true
	}
	var names []string
	for n := range known {
		names = append(names, n)
	}
	names = append(names, opts.EnvAllow...)
	for _, kv := range opts.Env {
		name, raw, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "STX_") || allowed[name] || raw == "" {
			continue // STX_X= (empty) counts as unset
		}
		pos := Position{File: "$" + name, Line: 1, Col: len(name) + 2}
		knob, ok := known[name]
		if !ok {
			if near := Suggest(name, names); near != "" {
				warns = append(warns, &Error{Pos: Position{File: "$" + name, Line: 1, Col: 1},
					Msg: fmt.Sprintf("%s is not a knob and is ignored; did you mean %q? (see stx knobs)", name, near)})
			}
			continue
		}
		o := override{recipe: opts.Only, path: []string{"knobs", knob}, raw: raw, pos: pos}
		if err := o.parse(ctx); err != nil {
			errs = append(errs, &Error{Pos: pos, Path: "knobs." + knob, Msg: err.Error()})
			continue
		}
		out = append(out, o)
	}
	// --set wins over the environment: apply the environment first.
	envFirst := make([]override, 0, len(out))
	for _, o := range out {
		if strings.HasPrefix(o.pos.File, "$") {
			envFirst = append(envFirst, o)
		}
	}
	for _, o := range out {
		if !strings.HasPrefix(o.pos.File, "$") {
			envFirst = append(envFirst, o)
		}
	}
	return envFirst, errs, warns
}

// parse reads the value as a CUE expression; a bare word is a string, so
// that --set knobs.lr_schedule=cosine works without shell quoting.
func (o *override) parse(ctx *cue.Context) error {
	raw := strings.TrimSpace(o.raw)
	if raw == "" {
		return fmt.Errorf("empty value")
	}
	expr, err := parser.ParseExpr("value", raw)
	if err != nil {
		return fmt.Errorf("cannot parse %q as a CUE value", raw)
	}
	if id, ok := expr.(*ast.Ident); ok && id.Name != "true" && id.Name != "false" && id.Name != "null" {
		expr = ast.NewString(raw)
	}
	if msg := exprLiteralProblem(expr); msg != "" {
		return errors.New(msg)
	}
	v := ctx.BuildExpr(expr)
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return fmt.Errorf("%q is not a concrete value", raw)
	}
	b, err := v.MarshalJSON()
	if err != nil {
		return fmt.Errorf("%q: %v", raw, err)
	}
	switch {
	case string(b) == "null":
		return errors.New("null: --set and STX_ variables set a value, they cannot remove one (leave the field out of the recipe)")
	case bytes.HasPrefix(b, []byte("{")):
		return fmt.Errorf("%s is a struct: set its fields one by one (%s.FIELD=VALUE); replacing the whole struct would drop the recipe's other values", raw, o.pathString())
	}
	o.value = b
	return nil
}

// resolve decodes a recipe that passed validation, with its overrides
// applied and validated.
func (c *Catalog) resolve(ctx *cue.Context, name string, rv, def cue.Value, sets []override) (*Recipe, List) {
	var mine []override
	for _, s := range sets {
		if s.recipe == "" || s.recipe == name {
			mine = append(mine, s)
		}
	}
	if len(mine) > 0 {
		var errs List
		data, err := rv.MarshalJSON()
		if err == nil {
			data, err = rolesAsList(rv, data)
		}
		if err != nil {
			return nil, List{{Pos: c.Pos(name, ""), Path: "recipes." + name, Msg: err.Error()}}
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, List{{Pos: c.Pos(name, ""), Path: "recipes." + name, Msg: err.Error()}}
		}
		for _, o := range mine {
			full := "recipes." + name + "." + o.pathString()
			if msg := checkSchemaPath(def, o.path); msg != "" {
				errs = append(errs, &Error{Pos: o.pos, Path: full, Msg: msg})
				continue
			}
			if err := setPath(m, o.path, o.value); err != nil {
				errs = append(errs, &Error{Pos: o.pos, Path: full, Msg: err.Error()})
			}
		}
		data, err = json.Marshal(m)
		if err != nil {
			return nil, List{{Pos: c.Pos(name, ""), Path: "recipes." + name, Msg: err.Error()}}
		}
		uv := def.Unify(ctx.CompileBytes(data))
		if err := uv.Validate(cue.Concrete(true)); err != nil {
			for _, e := range c.convert(err, "recipes."+name) {
				e.Pos = c.Pos(name, "") // fallback; replaced by the override's below
				for _, o := range mine {
					p := "recipes." + name + "." + o.pathString()
					if pathHasPrefix(e.Path, p) || pathHasPrefix(p, e.Path) {
						e.Pos = o.pos
					}
				}
				errs = append(errs, e)
			}
		}
		if len(errs) > 0 {
			return nil, errs
		}
		c.overrides[name] = mine
		rv = uv
	}
	// JSON then encoding/json is several times faster than cue's Decode.
	var r Recipe
	data, err := rv.MarshalJSON()
	if err == nil {
		data, err = rolesAsList(rv, data)
	}
	if err == nil {
		if errs := c.checkNumbers(name, data); len(errs) > 0 {
			return nil, errs
		}
		err = json.Unmarshal(data, &r)
	}
	if err != nil {
		return nil, List{{Pos: c.Pos(name, ""), Path: "recipes." + name, Msg: fmt.Sprintf("decoding: %v", err)}}
	}
	r.Name = name
	r.fillDefaults()
	return &r, nil
}

// checkSchemaPath verifies every step of an override path is a field the
// schema allows, so a typo gets a suggestion instead of a vague conflict.
func checkSchemaPath(def cue.Value, path []string) string {
	node := def
	for _, seg := range path {
		if node.IncompleteKind() == cue.ListKind {
			node = node.LookupPath(cue.MakePath(cue.AnyIndex))
			continue
		}
		sel := cue.Str(seg)
		if node.IncompleteKind()&cue.StructKind != 0 && !node.Allows(sel) {
			return fmt.Sprintf("field %q not allowed%s", seg, didYouMean(seg, fieldNames(node)))
		}
		next := node.LookupPath(cue.MakePath(sel))
		if !next.Exists() {
			next = node.LookupPath(cue.MakePath(cue.AnyString))
		}
		node = next
	}
	return ""
}

// setPath sets a value inside decoded JSON data. A list element is named by
// its index or, for lists of named things (roles), by its name.
func setPath(m map[string]any, path []string, val json.RawMessage) error {
	var cur any = m
	for i, seg := range path {
		last := i == len(path)-1
		switch x := cur.(type) {
		case map[string]any:
			if last {
				x[seg] = val
				return nil
			}
			next, ok := x[seg]
			if !ok || next == nil {
				next = map[string]any{}
				x[seg] = next
			}
			cur = next
		case []any:
			idx := -1
			if n, err := strconv.Atoi(seg); err == nil {
				idx = n
			} else {
				for j, e := range x {
					if em, ok := e.(map[string]any); ok && em["name"] == seg {
						idx = j
					}
				}
			}
			if idx < 0 || idx >= len(x) {
				return fmt.Errorf("no element %q in %s", seg, strings.Join(path[:i], "."))
			}
			if last {
				x[idx] = val
				return nil
			}
			cur = x[idx]
		default:
			return fmt.Errorf("%s is not a struct or list", strings.Join(path[:i], "."))
		}
	}
	return nil
}
