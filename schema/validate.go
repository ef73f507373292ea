package schema

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	cueerrors "cuelang.org/go/cue/errors"
)

// validate is pass one: the recipe unified with the closed schema, checked
// concrete. Unknown fields are found by walking the user's own value (a CUE
// error elsewhere in a struct can hide "field not allowed"), so that every
// typo is reported, each with a suggestion.
func (c *Catalog) validate(rv cue.Value, recipeDef cue.Value, prefix string) List {
	var errs List
	errs = append(errs, c.checkDefaults(rv, recipeDef, prefix)...)
	failed := len(errs) > 0
	if err := rv.Validate(cue.Concrete(true)); err != nil {
		failed = true
		for _, e := range c.convert(err, "") {
			if strings.HasSuffix(e.Msg, "field not allowed") {
				continue // reported by the walk below, with a suggestion
			}
			errs = append(errs, e)
		}
	}
	name := strings.TrimPrefix(prefix, "recipes.")
	if failed {
		errs = c.keyedRoleErrors(name, prefix, errs)
	}
	if !recipeName.MatchString(name) {
		errs = append(errs, &Error{Pos: c.Pos(name, ""), Path: prefix, Msg: fmt.Sprintf("recipe name %q must be lower_snake_case (%s)", name, recipeName)})
	}
	// A typo is a CUE error of its own ("field not allowed"), but other
	// errors in the same struct can hide it: once anything is wrong, walk
	// the user's value for every unknown field.
	if failed {
		if uv := c.userRecipe(name); uv.Exists() {
			errs = append(errs, c.walkAllowed(uv, recipeDef, prefix)...)
		}
	}
	return errs
}

var recipeName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkDefaults validates each recipe default against its knob. A default
// that does not fit is silently dropped by CUE (*v | _ falls back to _),
// so it must be checked on its own.
func (c *Catalog) checkDefaults(rv, recipeDef cue.Value, prefix string) List {
	dv := rv.LookupPath(cue.ParsePath("defaults"))
	if !dv.Exists() {
		return nil
	}
	it, err := dv.Fields()
	if err != nil {
		return nil
	}
	var errs List
	knobs := rv.LookupPath(cue.MakePath(cue.Str("knobs")))
	for it.Next() {
		// Fast path: the knob resolved to this default, so it fits.
		kv := knobs.LookupPath(cue.MakePath(it.Selector()))
		if d, ok := kv.Default(); ok && d.IsConcrete() && d.Equals(it.Value()) {
			continue
		}
		node := recipeDef.LookupPath(cue.MakePath(cue.Str("knobs"), it.Selector()))
		if !node.Exists() {
			continue // not a knob: reported by walkAllowed
		}
		u := node.Unify(it.Value())
		if err := u.Validate(cue.Concrete(true)); err != nil {
			// The error paths read knobs.NAME: place them under the recipe,
			// then name the field the user wrote.
			for _, e := range c.convert(err, prefix) {
				e.Path = strings.Replace(e.Path, prefix+".knobs.", prefix+".defaults.", 1)
				errs = append(errs, e)
			}
		}
	}
	return errs
}

// userRecipe is the recipe as the user wrote it, evaluated without the
// schema: its positions are the user's.
func (c *Catalog) userRecipe(name string) cue.Value {
	if !c.user().Exists() {
		return cue.Value{}
	}
	return c.user().LookupPath(cue.MakePath(cue.Str("recipes"), cue.Str(name)))
}

// walkAllowed reports every regular field of v that the schema node s does
// not allow, recursively.
func (c *Catalog) walkAllowed(v, s cue.Value, path string) List {
	var errs List
	switch v.IncompleteKind() {
	case cue.StructKind:
		it, err := v.Fields()
		if err != nil {
			return nil
		}
		for it.Next() {
			sel := it.Selector()
			if !sel.IsString() {
				continue
			}
			label := sel.Unquoted()
			child := path + "." + sel.String()
			if s.IncompleteKind()&cue.StructKind != 0 && !s.Allows(sel) {
				p, _ := c.userPos(it.Value().Pos())
				errs = append(errs, &Error{Pos: p, Path: child, Msg: "field not allowed" + didYouMean(label, fieldNames(s))})
				continue
			}
			next := s.LookupPath(cue.MakePath(sel))
			if !next.Exists() {
				// An optional field of the schema (task.workflow?) the user set.
				next = s.LookupPath(cue.MakePath(sel.Optional()))
			}
			if label == "defaults" && strings.Count(path, ".") == 1 {
				// Recipe defaults are knobs: check their names as knobs.
				next = s.LookupPath(cue.ParsePath("knobs"))
			}
			if label == "roles" && strings.Count(path, ".") == 1 {
				errs = append(errs, c.walkRoles(it.Value(), child)...)
				continue
			}
			errs = append(errs, c.walkAllowed(it.Value(), next, child)...)
		}
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return nil
		}
		for i := 0; it.Next(); i++ {
			es := s.LookupPath(cue.MakePath(cue.Index(i)))
			if !es.Exists() {
				es = s.LookupPath(cue.MakePath(cue.AnyIndex))
			}
			if !es.Exists() {
				continue
			}
			errs = append(errs, c.walkAllowed(it.Value(), es, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return errs
}

// fieldNames lists the regular fields a schema struct declares.
func fieldNames(s cue.Value) []string {
	var names []string
	it, err := s.Fields(cue.Optional(true))
	if err != nil {
		return nil
	}
	for it.Next() {
		if sel := it.Selector(); sel.IsString() {
			names = append(names, sel.Unquoted())
		}
	}
	return names
}

// convert turns CUE errors into stx errors: one line per problem, at the
// user's value, with disjunction noise collapsed into one message.
// prefix is prepended to the errors' paths (for values checked outside the
// loaded package, like a recipe with overrides applied).
func (c *Catalog) convert(err error, prefix string) List {
	type item struct {
		msg  string
		args []string
		pos  Position
	}
	type group struct {
		disj  bool
		items []item
	}
	var order []string
	groups := map[string]*group{}
	missing := map[string]bool{}
	var extra List
	for _, e := range cueerrors.Errors(err) {
		path := formatPath(e.Path())
		if prefix != "" {
			// Errors of #Recipe & data name the definition first.
			// Errors of #Recipe & data (or #Role & a role) name the definition first.
			path = prefix + "." + strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(path, "#Recipe"), "#Role"), ".")
		}
		if m := c.missingAncestor(path); prefix == "" && m != "" && !c.keyedRoleName(m) {
			// Everything below a field the user never wrote is one mistake:
			// the field is missing.
			if !missing[m] {
				missing[m] = true
				name := m[strings.LastIndexAny(m, ".[")+1:]
				extra = append(extra, &Error{Pos: c.errPos(m, e), Path: m, Msg: fmt.Sprintf("missing required field %q", strings.TrimSuffix(name, "]"))})
			}
			continue
		}
		g, ok := groups[path]
		if !ok {
			g = &group{}
			groups[path] = g
			order = append(order, path)
		}
		f, args := e.Msg()
		msg := fmt.Sprintf(f, args...)
		if strings.TrimSpace(msg) == "" {
			msg = e.Error()
		}
		if strings.Contains(msg, "errors in empty disjunction") {
			g.disj = true
			continue
		}
		bothForms := false
		if isRolesPath(path) {
			if msg, bothForms = c.rolesMsg(msg, path, prefix != ""); msg == "" {
				continue
			}
		}
		sargs := make([]string, len(args))
		for i, a := range args {
			sargs[i] = fmt.Sprint(a)
		}
		pos := c.errPos(path, e)
		if strings.HasPrefix(msg, "conflicting values ") && !isTypeConflict(msg) || bothForms {
			// Two values the user wrote disagree: name where the other is.
			var also []string
			var ups []Position
			for _, p := range cueerrors.Positions(e) {
				if up, ok := c.userPos(p); ok && up != pos && !slices.Contains(also, up.String()) {
					also = append(also, up.String())
					ups = append(ups, up)
				}
			}
			if bothForms && len(ups) > 0 {
				// The list is most likely the extension, written last: report
				// it there and the keyed form as the other place.
				last := ups[len(ups)-1]
				also = append([]string{pos.String()}, also[:len(also)-1]...)
				pos = last
			}
			if len(also) > 0 {
				msg += " (also set at " + strings.Join(also, ", ") + ")"
			}
		}
		g.items = append(g.items, item{msg: msg, args: sargs, pos: pos})
	}
	out := extra
	for _, path := range order {
		g := groups[path]
		if len(g.items) == 0 {
			continue
		}
		if !g.disj && !c.isEnum(path) || len(g.items) == 1 && !c.isEnum(path) {
			for _, it := range g.items {
				out = append(out, &Error{Pos: it.pos, Path: path, Msg: tidy(it.msg)})
			}
			continue
		}
		out = append(out, c.collapse(path, g.items[0].pos, func() (msgs []string, args [][]string) {
			for _, it := range g.items {
				msgs = append(msgs, it.msg)
				args = append(args, it.args)
			}
			return
		}))
	}
	return out
}

// collapse reports a failed disjunction (an enum or a "default | constraint"
// field) as one message.
func (c *Catalog) collapse(path string, pos Position, items func() ([]string, [][]string)) *Error {
	msgs, args := items()
	node := c.schemaAt(path)
	alts, def := enumOf(node)
	// The user's value is the one argument common to every conflict.
	count := map[string]int{}
	for _, a := range args {
		seen := map[string]bool{}
		for _, x := range a {
			if !seen[x] {
				count[x]++
				seen[x] = true
			}
		}
	}
	user := ""
	for x, n := range count {
		if n == len(args) && (user == "" || x < user) {
			user = x
		}
	}
	// Two of the user's own values may conflict ("constant" from one
	// place, "cosine" from another): that is a conflict, not a typo.
	if u, err := strconv.Unquote(user); err == nil && slices.Contains(alts, u) {
		user = ""
	}
	if len(alts) > 0 && user != "" {
		quoted := make([]string, len(alts))
		for i, a := range alts {
			quoted[i] = strconv.Quote(a)
		}
		msg := fmt.Sprintf("%s is not one of %s", user, strings.Join(quoted, ", "))
		if u, err := strconv.Unquote(user); err == nil {
			msg += didYouMean(u, alts)
		}
		return &Error{Pos: pos, Path: path, Msg: msg}
	}
	// A "*default | constraint" field: the conflict with the default is noise.
	best := ""
	for _, m := range msgs {
		if def != "" && strings.Contains(m, " "+def+" ") || strings.HasSuffix(m, " "+def) {
			continue
		}
		if best == "" || strings.Contains(m, "out of bound") || strings.Contains(m, "invalid value") {
			best = m
		}
	}
	if best == "" {
		best = msgs[0]
	}
	return &Error{Pos: pos, Path: path, Msg: tidy(best)}
}

var (
	boundRE = regexp.MustCompile(`^invalid value (.*) \(out of bound (.*)\)$`)
	typeRE  = regexp.MustCompile(`^conflicting values (.*) and (.*) \(mismatched types (\w+) and (\w+)\)$`)
)

// tidy rewords CUE's messages where a plainer one reads better.
func tidy(msg string) string {
	if m := boundRE.FindStringSubmatch(msg); m != nil {
		if strings.HasPrefix(m[2], "=~") {
			return fmt.Sprintf("%s does not match %s", m[1], strings.TrimPrefix(m[2], "=~"))
		}
		return fmt.Sprintf("%s is out of range: must be %s", m[1], m[2])
	}
	if m := typeRE.FindStringSubmatch(msg); m != nil {
		// Which side is the user's is not marked; the schema's side is a
		// type, a bound or a default, the user's a literal.
		user, want := m[1], m[4]
		if isTypeName(user) {
			user, want = m[2], m[3]
		}
		return fmt.Sprintf("%s has the wrong type: want %s", user, want)
	}
	if strings.HasPrefix(msg, "incompatible list lengths (0 and") {
		return "must not be empty"
	}
	if strings.HasPrefix(msg, "incomplete value ") {
		return "missing value: " + strings.TrimPrefix(msg, "incomplete value ") + " is required"
	}
	return msg
}

// missingAncestor returns the shallowest path below a recipe, on the way to
// path, that the user's value does not have ("" if they have it all).
func (c *Catalog) missingAncestor(path string) string {
	if !c.user().Exists() || !strings.HasPrefix(path, "recipes.") {
		return ""
	}
	sels := cue.ParsePath(path).Selectors()
	if len(sels) < 3 || !c.user().LookupPath(cue.MakePath(sels[:2]...)).Exists() {
		return ""
	}
	for i := 3; i <= len(sels); i++ {
		if !c.userLookup(sels[:i]).Exists() {
			if i == 3 && sels[2].String() == "knobs" && c.userLookup(sels).Exists() {
				continue // the knob is set under defaults
			}
			return cue.MakePath(sels[:i]...).String()
		}
	}
	return ""
}

// isEnum tells whether the schema node of path is a string enum.
func (c *Catalog) isEnum(path string) bool {
	alts, _ := enumOf(c.schemaAt(path))
	return len(alts) > 0
}

// enumOf returns the string alternatives of an enum node (following
// references such as #EstimatorName), and the default's text of any
// disjunction node.
func enumOf(node cue.Value) (alts []string, def string) {
	if !node.Exists() {
		return nil, ""
	}
	if d, ok := node.Default(); ok {
		def = fmt.Sprint(d)
	}
	if !collectEnum(node, &alts, 0) {
		return nil, def
	}
	return dedupe(alts), def
}

func collectEnum(v cue.Value, alts *[]string, depth int) bool {
	if depth > 8 {
		return false
	}
	if v.IsConcrete() && v.IncompleteKind() == cue.StringKind {
		s, err := v.String()
		if err != nil {
			return false
		}
		*alts = append(*alts, s)
		return true
	}
	op, args := v.Expr()
	switch op {
	case cue.OrOp:
		for _, a := range args {
			if !collectEnum(a, alts, depth+1) {
				return false
			}
		}
		return len(*alts) > 0
	case cue.AndOp:
		// string & ("a" | "b"): the enum is the disjunction inside.
		for _, a := range args {
			if o, _ := a.Expr(); o == cue.OrOp || o == cue.SelectorOp {
				return collectEnum(a, alts, depth+1)
			}
		}
		return false
	case cue.SelectorOp, cue.NoOp:
		e := v.Eval()
		if o, _ := e.Expr(); o == cue.SelectorOp || (o == cue.NoOp && !e.IsConcrete()) {
			return false
		}
		return collectEnum(e, alts, depth+1)
	}
	return false
}

// dedupe drops repeated strings, keeping the first of each.
func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// schemaAt finds the schema node of an error path ("recipes.x.roles[0].name").
func (c *Catalog) schemaAt(path string) cue.Value {
	rest, ok := strings.CutPrefix(path, "recipes.")
	if !ok || !c.recipeDef.Exists() {
		return cue.Value{}
	}
	sels := cue.ParsePath(rest).Selectors()
	if len(sels) == 0 {
		return cue.Value{}
	}
	s := c.recipeDef
	if len(sels) > 2 && sels[1].String() == "roles" && c.roleDef.Exists() {
		// Either form of roles: below it, one #Role.
		s, sels = c.roleDef, sels[2:]
	}
	for _, sel := range sels[1:] {
		next := s.LookupPath(cue.MakePath(sel))
		if !next.Exists() && sel.Type() == cue.StringLabel && sel.ConstraintType() == 0 {
			next = s.LookupPath(cue.MakePath(sel.Optional())) // an optional field (model.lora)
		}
		if !next.Exists() && sel.Type() == cue.IndexLabel {
			next = s.LookupPath(cue.MakePath(cue.AnyIndex))
		}
		if !next.Exists() && sel.Type() == cue.StringLabel {
			next = s.LookupPath(cue.MakePath(cue.AnyString))
		}
		s = next
	}
	return s
}

// errPos places an error at the user's value for its path; failing that at
// the first user position CUE recorded; failing that at the nearest parent.
func (c *Catalog) errPos(path string, e cueerrors.Error) Position {
	if p, ok := c.userPathPos(path); ok {
		return p
	}
	for _, p := range cueerrors.Positions(e) {
		if up, ok := c.userPos(p); ok {
			return up
		}
	}
	for path != "" {
		path = parentPath(path)
		if p, ok := c.userPathPos(path); ok {
			return p
		}
	}
	return Position{File: c.Files[0], Line: 1, Col: 1}
}

func (c *Catalog) userPathPos(path string) (Position, bool) {
	if path == "" || !c.user().Exists() {
		return Position{}, false
	}
	v := c.userLookup(cue.ParsePath(path).Selectors())
	if !v.Exists() {
		return Position{}, false
	}
	if f, ok := v.Source().(*ast.Field); ok && f.Value != nil {
		// Point at the value, not at its label.
		return c.userPos(f.Value.Pos())
	}
	return c.userPos(v.Pos())
}

// userLookup finds a path in the user's own value. A knob the user set
// under `defaults` stands for the same knob under `knobs`.
func (c *Catalog) userLookup(sels []cue.Selector) cue.Value {
	v := c.user().LookupPath(cue.MakePath(sels...))
	if v.Exists() || len(sels) < 4 || sels[0].String() != "recipes" || sels[2].String() != "knobs" {
		return v
	}
	alias := append([]cue.Selector{sels[0], sels[1], cue.Str("defaults")}, sels[3:]...)
	return c.user().LookupPath(cue.MakePath(alias...))
}

// formatPath renders CUE's path elements as "a.b[0].c".
func formatPath(elems []string) string {
	var b strings.Builder
	for i, e := range elems {
		if _, err := strconv.Atoi(e); err == nil {
			fmt.Fprintf(&b, "[%s]", e)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e)
	}
	return b.String()
}

func isTypeConflict(msg string) bool { return typeRE.MatchString(msg) }

func isTypeName(s string) bool {
	switch s {
	case "int", "float", "number", "string", "bool", "bytes", "null", "struct", "list", "{...}", "[...]":
		return true
	}
	return strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") && strings.Contains(s, "...") || strings.HasPrefix(s, "=~")
}
