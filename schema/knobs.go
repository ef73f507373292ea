package schema

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
)

// KnobDoc documents one knob, read from the schema's own source so that the
// documentation cannot drift from the constraints.
type KnobDoc struct {
	Name       string
	Doc        string
	Constraint string // the type and range, e.g. "number & >0 & <=1"
	Default    string // "" when the knob has none (optional knobs)
	Optional   bool
	Hot        bool // a running job may change it (hot reload)
	Group      string
}

// Env is the knob's environment variable ("" for a map knob, which only
// files and --set can give).
func (k KnobDoc) Env() string {
	if strings.HasPrefix(k.Constraint, "{") {
		return ""
	}
	return EnvName(k.Name)
}

// EnvName is the environment variable of a knob name.
func EnvName(knob string) string { return "STX_" + strings.ToUpper(knob) }

// KnobDocs lists the knobs of #Knobs in schema order.
func KnobDocs() ([]KnobDoc, error) {
	docs, err := knobDocs()
	return slices.Clone(docs), err
}

// knobDocs and stripped parse the embedded schema once per process; the
// results never change.
var (
	knobDocs = sync.OnceValues(readKnobDocs)
	stripped = sync.OnceValues(func() (splitResult, error) {
		text, defaults, err := splitSchema()
		return splitResult{text, defaults}, err
	})
)

type splitResult struct {
	text     string
	defaults map[string]string
}

// defaultsCUE declares #KnobDefaults, the schema's knob defaults as data.
func (s splitResult) defaultsCUE() string {
	var b strings.Builder
	b.WriteString("\n#KnobDefaults: {\n")
	for _, name := range slices.Sorted(maps.Keys(s.defaults)) {
		fmt.Fprintf(&b, "\t%s: %s\n", name, s.defaults[name])
	}
	b.WriteString("}\n")
	return b.String()
}

func readKnobDocs() ([]KnobDoc, error) {
	f, err := parser.ParseFile(schemaFile, schemaSource, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("embedded schema: %w", err)
	}
	var body *ast.StructLit
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.Field); ok && labelName(fd.Label) == "#Knobs" {
			body, _ = fd.Value.(*ast.StructLit)
		}
	}
	if body == nil {
		return nil, fmt.Errorf("embedded schema: no #Knobs struct")
	}
	var out []KnobDoc
	group := ""
	for _, d := range body.Elts {
		fd, ok := d.(*ast.Field)
		if !ok {
			continue
		}
		k := KnobDoc{Name: labelName(fd.Label), Optional: fd.Constraint == token.OPTION, Group: group}
		// A "---- name ----" comment starts a group. The parser attaches
		// it to the field above (after it) or, for the first, to the field
		// below: either way it holds from the next field on.
		var docLines []string
		nextGroup := ""
		for _, cg := range ast.Comments(fd) {
			for _, line := range strings.Split(strings.TrimSpace(cg.Text()), "\n") {
				if g, ok := strings.CutPrefix(line, "---- "); ok {
					if cg.Position == 0 {
						group = strings.TrimSuffix(g, " ----")
						k.Group = group
					} else {
						nextGroup = strings.TrimSuffix(g, " ----")
					}
					continue
				}
				if cg.Position == 0 && strings.TrimSpace(line) != "" {
					docLines = append(docLines, line)
				}
			}
		}
		k.Doc = strings.Join(docLines, " ")
		for _, a := range fd.Attrs {
			if strings.HasPrefix(a.Text, "@knob(") {
				k.Hot = strings.Contains(a.Text, "hot")
			}
		}
		k.Constraint, k.Default = splitDefault(fd.Value)
		k.Constraint = strings.Join(strings.Fields(k.Constraint), " ")
		out = append(out, k)
		if nextGroup != "" {
			group = nextGroup
		}
	}
	return out, nil
}

// splitDefault separates "constraint | *default" into its two parts. An
// enum keeps all its values as the constraint.
func splitDefault(x ast.Expr) (constraint, def string) {
	alts := disjuncts(x)
	var rest []string
	allLits := true
	for _, a := range alts {
		if u, ok := a.(*ast.UnaryExpr); ok && u.Op == token.MUL {
			def = exprString(u.X)
			if _, lit := u.X.(*ast.BasicLit); !lit {
				allLits = false
			}
			continue
		}
		if _, lit := a.(*ast.BasicLit); !lit {
			allLits = false
		}
		rest = append(rest, exprString(a))
	}
	if allLits && def != "" {
		rest = append([]string{def}, rest...)
	}
	return strings.Join(rest, " | "), def
}

func exprString(e ast.Expr) string {
	b, err := format.Node(e)
	if err != nil {
		return fmt.Sprint(e)
	}
	return string(b)
}

func labelName(l ast.Label) string {
	name, _, _ := ast.LabelName(l)
	return name
}

// splitSchema returns the schema as stx unifies recipes with it: #Knobs
// without its `*default` marks, plus the defaults by knob name. Recipes may
// set knob defaults of their own (the catalog's `defaults`); had the schema
// defaults too, CUE would find two defaults and resolve neither. stx fills
// a schema default in only where a recipe has no value and no default.
func splitSchema() (string, map[string]string, error) {
	f, err := parser.ParseFile(schemaFile, schemaSource, parser.ParseComments)
	if err != nil {
		return "", nil, fmt.Errorf("embedded schema: %w", err)
	}
	defaults := map[string]string{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.Field)
		if !ok || labelName(fd.Label) != "#Knobs" {
			continue
		}
		body, _ := fd.Value.(*ast.StructLit)
		if body == nil {
			continue
		}
		for _, e := range body.Elts {
			kf, ok := e.(*ast.Field)
			if !ok {
				continue
			}
			v, def := stripDefault(kf.Value)
			if def != "" {
				kf.Value = v
				defaults[labelName(kf.Label)] = def
			}
		}
	}
	b, err := format.Node(f)
	if err != nil {
		return "", nil, fmt.Errorf("embedded schema: %w", err)
	}
	return string(b), defaults, nil
}

// stripDefault removes the `*x` alternative of a disjunction; in an enum of
// literals the default stays as a plain alternative.
func stripDefault(x ast.Expr) (ast.Expr, string) {
	alts := disjuncts(x)
	var rest []ast.Expr
	def := ""
	var defExpr ast.Expr
	allLits := true
	for _, a := range alts {
		if u, ok := a.(*ast.UnaryExpr); ok && u.Op == token.MUL {
			def, defExpr = exprString(u.X), u.X
			continue
		}
		if _, lit := a.(*ast.BasicLit); !lit {
			allLits = false
		}
		rest = append(rest, a)
	}
	if def == "" {
		return x, ""
	}
	if allLits {
		rest = append([]ast.Expr{defExpr}, rest...)
	}
	if len(rest) == 0 {
		return ast.NewIdent("_"), def
	}
	out := rest[0]
	for _, a := range rest[1:] {
		out = &ast.BinaryExpr{X: out, Op: token.OR, Y: a}
	}
	return out, def
}

// Effective returns the schema as stx unifies recipes with it: knob
// defaults moved into #KnobDefaults and the name enums closed over the
// registries. Written next to a recipe file (same package clause), it lets
// plain `cue vet` check recipes the way stx does, and editors see it.
func Effective(enums Enums) (string, error) {
	split, err := stripped()
	if err != nil {
		return "", err
	}
	return split.text + enums.cue() + split.defaultsCUE(), nil
}

// disjuncts lists the alternatives of a (possibly nested) `a | b | c`.
func disjuncts(x ast.Expr) []ast.Expr {
	if b, ok := x.(*ast.BinaryExpr); ok && b.Op == token.OR {
		return append(disjuncts(b.X), disjuncts(b.Y)...)
	}
	return []ast.Expr{x}
}
