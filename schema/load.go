// Package schema is stx's recipe language: the CUE schema embedded in the
// binary, loading of recipe files (Load), validation with file:line:col
// errors, the cross-knob bounds CUE cannot express (checks.go), command-line
// and environment overrides, the knob documentation read from the schema's
// own comments (KnobDocs, for `stx knobs`), decoding into Go structs
// (types.go; task.workflow in workflow.go), rendering a resolved recipe as
// CUE, JSON or YAML (Format) and validating one in memory (Check).
//
// It is the only package of stx that imports CUE, and it knows nothing of
// training: checks that need the registries of specializations or
// estimators live in the engine, which passes the registered names in
// through Enums.
package schema

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"stx.dev/stx/internal/plainfile"
)

//go:embed schema.cue
var schemaSource string

// schemaFile is the name of the schema inside a loaded package. Errors whose
// only position is in this file are reported at the user's value instead.
const schemaFile = "stx.schema.cue"

// Enums are the names the Go registries know; they close the schema's
// #SpecializationName, #EstimatorName and #TaskName.
type Enums struct {
	Specializations []string
	Estimators      []string
	Tasks           []string
}

// Options control Load.
type Options struct {
	Enums Enums
	// Sets are "path=value" overrides (--set); a path is relative to each
	// recipe ("knobs.lr") or names one ("recipes.grpo.knobs.lr").
	Sets []string
	// Env is the environment (os.Environ() form); STX_<KNOB> variables
	// override knobs of every recipe.
	Env []string
	// EnvAllow are STX_ variables that are not knobs (e.g. STX_BACKEND).
	EnvAllow []string
	// Only restricts overrides and decoding to one recipe ("" = all).
	Only string
	// Builtin is the catalog loaded as "recipes.cue" when no arguments are
	// given and the working directory has no recipes.cue.
	Builtin []byte
	// Dir is the working directory (default: the process's).
	Dir string
	// Sources are files held in memory, by path (relative to Dir or
	// absolute): read instead of the disk, whether or not a file is there.
	Sources map[string][]byte
	// maxRecipes replaces the package's bound in tests (0: maxRecipes).
	maxRecipes int
}

// Catalog is a loaded, validated set of recipes.
type Catalog struct {
	// Names of the recipes in the order they were defined.
	Names []string
	// Recipes by name, resolved with defaults and overrides.
	Recipes map[string]*Recipe
	// Files that were loaded (as given, or "recipes.cue" for the builtin).
	Files []string
	// Warnings are problems that do not stop a load: STX_ variables that
	// are not knobs but whose names are near misses of one.
	Warnings List

	dir       string
	userRoot  func() cue.Value // the user's files alone, for positions (built on first use)
	recipeDef cue.Value        // #Recipe
	roleDef   cue.Value        // #Role
	overrides map[string][]override
	// at is, for a catalog of Check, the catalog of the recipe files the
	// checked recipe came from, where its paths are reported (nil: none).
	at func() *Catalog
}

// Pos returns the position of the value at path inside a recipe (path is
// relative to the recipe, e.g. "syncs[0].keys"). It walks up to the nearest
// value that has a position in a user source.
func (c *Catalog) Pos(recipe, path string) Position {
	if at := c.origin(); at != nil {
		return at.Pos(recipe, path)
	}
	path = c.UserPath(recipe, path)
	for _, o := range c.overrides[recipe] {
		if pathHasPrefix(path, o.pathString()) {
			return o.pos
		}
	}
	full := "recipes." + recipe
	if recipe == "" {
		full = "recipes"
	}
	if path != "" {
		full += "." + path
		if strings.HasPrefix(path, "[") {
			full = "recipes." + recipe + path
		}
	}
	for ; full != ""; full = parentPath(full) {
		if p, ok := c.userPathPos(full); ok {
			return p
		}
	}
	return Position{File: c.Files[0], Line: 1, Col: 1}
}

// user returns the user's own value, building it the first time: only
// error reports need it.
func (c *Catalog) user() cue.Value {
	if c.userRoot == nil {
		return cue.Value{}
	}
	return c.userRoot()
}

func (c *Catalog) userPos(p token.Pos) (Position, bool) {
	if !p.IsValid() || p.Filename() == "" || filepath.Base(p.Filename()) == schemaFile {
		return Position{}, false
	}
	return Position{File: relName(c.dir, p.Filename()), Line: p.Line(), Col: p.Column()}, true
}

func relName(dir, name string) string {
	if strings.HasPrefix(name, "--set") || strings.HasPrefix(name, "$") {
		return name
	}
	if r, err := filepath.Rel(dir, name); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return name
}

// Load reads recipe files (several files of one package, or one package
// directory), validates every recipe against the schema in two passes
// (CUE constraints, then cross-field checks in Go) and decodes them. All
// problems are returned together as a List; the Catalog holds the recipes
// that are valid.
func Load(args []string, opts Options) (*Catalog, error) {
	dir := opts.Dir
	if dir == "" {
		dir = "."
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	c := &Catalog{
		Recipes:   map[string]*Recipe{},
		dir:       dir,
		overrides: map[string][]override{},
	}
	ctx := cuecontext.New()
	named := len(args) > 0
	if !named {
		args = []string{"recipes.cue"}
	}
	c.Files = args
	plan, err := c.plan(ctx, args, named, opts)
	if err != nil {
		return nil, err
	}
	root, recipes, err := c.buildRoot(ctx, plan)
	if err != nil {
		return nil, err
	}
	errs := c.topLevelErrors(root)
	recipeDef := root.LookupPath(cue.ParsePath("#Recipe"))
	if !recipeDef.Exists() {
		return nil, fmt.Errorf("embedded schema: no #Recipe")
	}
	c.recipeDef = recipeDef
	c.roleDef = root.LookupPath(cue.ParsePath("#Role"))

	sets, setErrs, warns := parseOverrides(ctx, opts)
	errs = append(errs, setErrs...)
	c.Warnings = warns

	it, err := recipes.Fields()
	if err != nil {
		return nil, append(errs, c.convert(err, "")...).Sort()
	}
	errs = append(errs, c.loadRecipes(ctx, it, sets, opts)...)
	errs = append(errs, c.missingNames(sets, opts)...)
	if len(errs) > 0 {
		return c, errs.Sort()
	}
	return c, nil
}

// loadPlan is how Load hands the user's files and the schema to CUE: the arguments and
// directory of load.Instances and the overlay that holds the schema (and the built-in
// catalog), once with the schema and once with a stub schema for the user's own positions.
type loadPlan struct {
	loadArgs    []string
	loadDir     string
	overlay     map[string]load.Source
	stubOverlay map[string]load.Source
}

// plan puts the schema, in the user's package, beside the user's files (or the built-in
// catalog when no file is named and recipes.cue is absent), and prepares c.userRoot.
func (c *Catalog) plan(ctx *cue.Context, args []string, named bool, opts Options) (*loadPlan, error) {
	dir := c.dir
	schemaText, err := Effective(opts.Enums)
	if err != nil {
		return nil, err
	}
	overlay := map[string]load.Source{}
	builtin := map[string][]byte{}
	for p, data := range opts.Sources {
		builtin[abs(dir, p)] = data
	}
	if !named {
		if _, err := os.Stat(filepath.Join(dir, "recipes.cue")); err != nil && opts.Builtin != nil {
			p := filepath.Join(dir, "recipes.cue")
			overlay[p] = load.FromBytes(opts.Builtin)
			builtin[p] = opts.Builtin
		}
	}
	pkg, schemaDir, err := packageOf(dir, args, builtin)
	if err != nil {
		return nil, err
	}
	for p, data := range builtin {
		overlay[p] = load.FromBytes(data)
	}
	if lerrs := checkLiterals(dir, builtin); len(lerrs) > 0 {
		return nil, lerrs.Sort()
	}
	header := "package " + pkg + "\n"
	if pkg == "" {
		header = ""
	}
	// The schema file's own package clause is replaced by the user's.
	body := strings.Replace(schemaText, "package stx\n", "", 1)
	schemaPath := filepath.Join(schemaDir, schemaFile)
	overlay[schemaPath] = load.FromString(header + body)
	var loadArgs []string
	loadDir := dir
	if isFileArgs(dir, args) {
		loadArgs = append(loadArgs, args...)
		loadArgs = append(loadArgs, schemaPath)
	} else {
		// CUE wants a package directory as a relative import path ("./x");
		// load it as "." from inside, wherever it is.
		loadDir, loadArgs = schemaDir, []string{"."}
	}
	plan := &loadPlan{loadArgs: loadArgs, loadDir: loadDir, overlay: overlay}
	c.planUserRoot(ctx, plan, schemaPath, header)
	return plan, nil
}

// planUserRoot prepares c.userRoot: the same files against a stub schema (every definition
// is top) give the user's own values, whose positions are the ones to report.
func (c *Catalog) planUserRoot(ctx *cue.Context, plan *loadPlan, schemaPath, header string) {
	plan.stubOverlay = map[string]load.Source{}
	for k, v := range plan.overlay {
		plan.stubOverlay[k] = v
	}
	plan.stubOverlay[schemaPath] = load.FromString(header + stubSchema())
	c.userRoot = sync.OnceValue(func() cue.Value {
		ui := load.Instances(plan.loadArgs, &load.Config{Dir: plan.loadDir, Overlay: plan.stubOverlay})
		if len(ui) != 1 || ui[0].Err != nil {
			return cue.Value{}
		}
		return ctx.BuildInstance(ui[0])
	})
}

// buildRoot builds the user's files with the schema and returns the root value and its
// recipes struct.
func (c *Catalog) buildRoot(ctx *cue.Context, plan *loadPlan) (root, recipes cue.Value, err error) {
	args := c.Files
	insts := load.Instances(plan.loadArgs, &load.Config{Dir: plan.loadDir, Overlay: plan.overlay})
	if len(insts) != 1 {
		return root, recipes, List{{Pos: Position{File: args[0]}, Msg: fmt.Sprintf("expected one CUE package, found %d", len(insts))}}
	}
	if err := insts[0].Err; err != nil {
		return root, recipes, c.convert(err, "").Sort()
	}
	root = ctx.BuildInstance(insts[0])
	recipes = root.LookupPath(cue.ParsePath("recipes"))
	if !recipes.Exists() {
		if err := root.Err(); err != nil {
			return root, recipes, c.convert(err, "").Sort()
		}
		return root, recipes, List{{Pos: Position{File: args[0], Line: 1, Col: 1}, Msg: `no recipes: define them under a top-level "recipes" struct`}}
	}
	return root, recipes, nil
}

// topLevelErrors reports fields at the top other than "recipes" (definitions and hidden
// helpers may stand there).
func (c *Catalog) topLevelErrors(root cue.Value) List {
	var errs List
	top, err := root.Fields()
	if err == nil {
		for top.Next() {
			if sel := top.Selector(); sel.IsString() && sel.String() != "recipes" {
				p, ok := c.userPos(top.Value().Pos())
				if !ok {
					// A field that comes from an embedding has no position
					// of its own (found by FuzzLoad: "recipes" embedded).
					p = Position{File: c.Files[0], Line: 1, Col: 1}
				}
				errs = append(errs, &Error{Pos: p, Path: sel.String(), Msg: `field not allowed at the top level: only "recipes" (use _hidden fields or #definitions for helpers)`})
			}
		}
	}
	return errs
}

// loadRecipes validates, resolves (with the --set overrides) and checks each recipe of it,
// keeping the valid ones in c.Recipes; at most maxRecipes are read.
func (c *Catalog) loadRecipes(ctx *cue.Context, it *cue.Iterator, sets []override, opts Options) List {
	var errs List
	reported := map[string]bool{}
	for it.Next() {
		name := it.Selector().Unquoted()
		rv := it.Value()
		if limit := cmp.Or(opts.maxRecipes, maxRecipes); len(c.Names) == limit {
			errs = append(errs, &Error{Pos: c.Pos(name, ""), Path: "recipes." + name,
				Msg: fmt.Sprintf("more than %d recipes in one load: CUE keeps every checked recipe in memory (about half a megabyte each); split the files", limit)})
			break
		}
		c.Names = append(c.Names, name)
		rerrs := c.validate(rv, c.recipeDef, "recipes."+name)
		if len(rerrs) > 0 {
			errs = append(errs, rerrs...)
			continue
		}
		if opts.Only != "" && opts.Only != name {
			continue
		}
		r, oerrs := c.resolve(ctx, name, rv, c.recipeDef, sets)
		if len(oerrs) > 0 {
			for _, e := range oerrs {
				// An override of every recipe that fails fails the same way
				// in each: report it once, under its own path.
				if o, ok := overrideAt(sets, e.Pos); ok && o.recipe == "" {
					if rel, ok := strings.CutPrefix(e.Path, "recipes."+name+"."); ok {
						e.Path = rel
					}
					if reported[e.Error()] {
						continue
					}
					reported[e.Error()] = true
				}
				errs = append(errs, e)
			}
			continue
		}
		cerrs := c.check(r)
		if len(cerrs) > 0 {
			errs = append(errs, cerrs...)
			continue
		}
		c.Recipes[name] = r
	}
	return errs
}

// missingNames reports an empty catalog, and a recipe named by --only or by a --set
// override that does not exist.
func (c *Catalog) missingNames(sets []override, opts Options) List {
	var errs List
	args := c.Files
	if len(c.Names) == 0 {
		errs = append(errs, &Error{Pos: Position{File: args[0], Line: 1, Col: 1}, Msg: `no recipes: define them under a top-level "recipes" struct`})
	}
	if opts.Only != "" {
		if !slices.Contains(c.Names, opts.Only) {
			errs = append(errs, &Error{Pos: Position{File: args[0]}, Msg: fmt.Sprintf("no recipe %q%s", opts.Only, didYouMean(opts.Only, c.Names))})
		}
	}
	for _, s := range sets {
		if s.recipe != "" {
			if !slices.Contains(c.Names, s.recipe) {
				errs = append(errs, &Error{Pos: s.pos, Path: "recipes." + s.recipe, Msg: fmt.Sprintf("no recipe %q%s", s.recipe, didYouMean(s.recipe, c.Names))})
			}
		}
	}
	return errs
}

func overrideAt(sets []override, p Position) (override, bool) {
	for _, o := range sets {
		if o.pos == p {
			return o, true
		}
	}
	return override{}, false
}

func didYouMean(s string, cands []string) string {
	if m := Suggest(s, cands); m != "" {
		return fmt.Sprintf("; did you mean %q?", m)
	}
	return ""
}

// stubSchema declares every definition of the schema as top (_), so that
// user files referring to #Recipe & co. evaluate without the constraints.
func stubSchema() string {
	var b strings.Builder
	for _, line := range strings.Split(schemaSource, "\n") {
		if strings.HasPrefix(line, "#") {
			if name, _, ok := strings.Cut(line, ":"); ok {
				fmt.Fprintf(&b, "%s: _\n", name)
			}
		}
	}
	return b.String()
}

// cue renders the registry names as CUE disjunctions closing the schema.
func (e Enums) cue() string {
	var b strings.Builder
	b.WriteString("\n")
	for _, x := range []struct {
		name  string
		names []string
	}{{"#SpecializationName", e.Specializations}, {"#EstimatorName", e.Estimators}, {"#TaskName", e.Tasks}} {
		if len(x.names) == 0 {
			continue
		}
		names := append([]string(nil), x.names...)
		sort.Strings(names)
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		fmt.Fprintf(&b, "%s: %s\n", x.name, strings.Join(quoted, " | "))
	}
	return b.String()
}

func isFileArgs(dir string, args []string) bool {
	for _, a := range args {
		if !strings.HasSuffix(a, ".cue") {
			return false
		}
		if st, err := os.Stat(abs(dir, a)); err == nil && st.IsDir() {
			return false
		}
	}
	return true
}

func abs(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// maxRecipes bounds the recipes of one load, so that memory stays bounded
// (about 0.5 MB a recipe while CUE holds the evaluated catalog).
const maxRecipes = 4096

// maxRecipeFile bounds a recipe file: recipes are hand-written text, and a
// multi-gigabyte file is a mistake to report, not to load.
const maxRecipeFile = 64 << 20

// packageOf finds the package name shared by the loaded files and the
// directory the schema file joins. Several packages in one directory, or
// files of different packages, are errors (CUE would refuse them too, with
// a less helpful message).
func packageOf(dir string, args []string, builtin map[string][]byte) (pkg, schemaDir string, err error) {
	var files []string
	if isFileArgs(dir, args) {
		for _, a := range args {
			files = append(files, abs(dir, a))
		}
		schemaDir = filepath.Dir(files[0])
	} else {
		if len(args) != 1 {
			return "", "", List{{Pos: Position{File: args[1]}, Msg: "give either .cue files or one package directory"}}
		}
		schemaDir = abs(dir, args[0])
		entries, rerr := os.ReadDir(schemaDir)
		if rerr != nil {
			return "", "", List{{Pos: Position{File: args[0]}, Msg: readErr(rerr)}}
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".cue") && !strings.HasSuffix(e.Name(), "_tool.cue") {
				files = append(files, filepath.Join(schemaDir, e.Name()))
			}
		}
		if len(files) == 0 {
			return "", "", List{{Pos: Position{File: args[0]}, Msg: "no .cue files in directory"}}
		}
	}
	// The files are read here, once, and handed to CUE as an overlay: a
	// named pipe or a device named like a recipe must be refused before
	// anything reads it (reading a FIFO blocks, a device never ends).
	for _, f := range files {
		if _, ok := builtin[f]; ok {
			continue
		}
		data, rerr := plainfile.ReadFile(f, maxRecipeFile)
		if errors.Is(rerr, fs.ErrNotExist) {
			continue // CUE reports it, as it always has
		}
		if rerr != nil {
			return "", "", List{{Pos: Position{File: relName(dir, f), Line: 1, Col: 1}, Msg: strings.TrimPrefix(rerr.Error(), f+": ")}}
		}
		if line, col, msg := encodingProblem(data); msg != "" {
			return "", "", List{{Pos: Position{File: relName(dir, f), Line: line, Col: col}, Msg: msg}}
		}
		builtin[f] = data
	}
	first := ""
	for _, f := range files {
		name, pos, perr := packageClause(f, builtin[f])
		if perr != nil {
			// Syntax errors are reported by the loader with positions.
			continue
		}
		if first == "" {
			first, pkg = f, name
			continue
		}
		if name != pkg {
			return "", "", List{{
				Pos: Position{File: relName(dir, f), Line: pos.Line(), Col: pos.Column()},
				Msg: fmt.Sprintf("package %q differs from package %q of %s; stx loads one package at a time", name, pkg, relName(dir, first)),
			}}
		}
	}
	return pkg, schemaDir, nil
}

// encodingProblem finds what keeps a recipe file from being UTF-8 text:
// UTF-16 (a byte-order mark, or the NUL bytes of ASCII in UTF-16), or the
// first invalid byte sequence, with its line and column.
func encodingProblem(data []byte) (line, col int, msg string) {
	if bytes.HasPrefix(data, []byte{0xff, 0xfe}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) ||
		bytes.IndexByte(data[:min(len(data), 4096)], 0) >= 0 {
		return 1, 1, "the file is UTF-16 (or binary), not UTF-8 text: save it as UTF-8"
	}
	line, col = 1, 1
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return line, col, fmt.Sprintf("invalid UTF-8 (byte 0x%02x): save the file as UTF-8", data[i])
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col += n // CUE's columns count bytes
		}
		i += n
	}
	return 0, 0, ""
}

// packageClause reads a file's package name (src: contents, or nil to read
// the file).
func packageClause(path string, src []byte) (string, token.Pos, error) {
	var in any
	if src != nil {
		in = src
	}
	f, err := parser.ParseFile(path, in, parser.PackageClauseOnly)
	if err != nil {
		return "", token.NoPos, err
	}
	for _, d := range f.Decls {
		if p, ok := d.(*ast.Package); ok {
			return p.Name.Name, p.Name.Pos(), nil
		}
	}
	return "", token.NoPos, nil
}

func readErr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "no such file or directory"
	}
	return err.Error()
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func pathHasPrefix(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+".") || strings.HasPrefix(p, prefix+"[")
}
