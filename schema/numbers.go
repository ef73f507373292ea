package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"
)

// checkNumbers finds numbers of a resolved recipe (its JSON) that float64
// cannot hold: CUE computes with exact decimals, so lr: 1e-400 passes
// `>0` in CUE and would reach the engine as 0, and 1e400 as +Inf. Each is
// reported at the value's position.
func (c *Catalog) checkNumbers(name string, data []byte) List {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil // the decoder that follows reports it
	}
	var errs List
	walkNumbers(v, "", func(path string, n json.Number) {
		if msg := numberProblem(string(n)); msg != "" {
			errs = append(errs, c.Err(name, path, "%s", msg))
		}
	})
	return errs
}

// walkNumbers calls f for every number in v with its path ("knobs.lr",
// "task.reward[0].weight"), in a fixed order.
func walkNumbers(v any, path string, f func(string, json.Number)) {
	switch x := v.(type) {
	case json.Number:
		f(path, x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			walkNumbers(x[k], p, f)
		}
	case []any:
		for i, e := range x {
			walkNumbers(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

// numberProblem says why a JSON number literal has no faithful float64
// ("" when it has one), or an integer literal that int64 cannot.
func numberProblem(lit string) string {
	lit = strings.ToLower(lit)
	if !strings.ContainsAny(lit, ".e") {
		if _, err := strconv.ParseInt(lit, 10, 64); errors.Is(err, strconv.ErrRange) {
			return fmt.Sprintf("%s is too large for a 64-bit integer (%d to %d)", lit, math.MinInt64, math.MaxInt64)
		}
		return ""
	}
	f, err := strconv.ParseFloat(lit, 64)
	if errors.Is(err, strconv.ErrRange) || math.IsInf(f, 0) {
		return fmt.Sprintf("%s is too large for a float64 (largest %g)", lit, math.MaxFloat64)
	}
	if err != nil {
		return ""
	}
	if f == 0 && !zeroLiteral(lit) {
		return fmt.Sprintf("%s is too small for a float64: it would be 0 (smallest %g)", lit, math.SmallestNonzeroFloat64)
	}
	return ""
}

// zeroLiteral reports whether a number literal's digits before any exponent
// are all zero.
func zeroLiteral(lit string) bool {
	mant, _, _ := strings.Cut(lit, "e")
	return strings.Trim(mant, "+-0.") == ""
}

// checkLiterals checks every number literal of the recipe files (path →
// contents; names are reported relative to dir). Checking the resolved
// values is not enough: CUE reads a literal whose exponent is out of its
// range, such as 1e-400000, as another number (1) without an error.
func checkLiterals(dir string, files map[string][]byte) List {
	var errs List
	for _, path := range slices.Sorted(maps.Keys(files)) {
		f, err := parser.ParseFile(path, files[path])
		if err != nil {
			continue // the loader reports syntax errors with positions
		}
		// The labels of the fields around a literal name its path; inside
		// a list (or an expression label) the path is left out.
		var labels []string
		lists := 0
		ast.Walk(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Field:
				name, _, err := ast.LabelName(x.Label)
				if err != nil {
					name = ""
				}
				labels = append(labels, name)
			case *ast.ListLit:
				lists++
			case *ast.BasicLit:
				if msg := literalProblem(x); msg != "" {
					p := x.Pos()
					e := &Error{Pos: Position{File: relName(dir, path), Line: p.Line(), Col: p.Column()}, Msg: msg}
					if lists == 0 && !slices.Contains(labels, "") {
						e.Path = strings.Join(labels, ".")
					}
					errs = append(errs, e)
				}
			}
			return true
		}, func(n ast.Node) {
			switch n.(type) {
			case *ast.Field:
				labels = labels[:len(labels)-1]
			case *ast.ListLit:
				lists--
			}
		})
	}
	return errs
}

// literalProblem is numberProblem for a CUE number literal ("" for other
// literals and for forms float64 and int64 read exactly as CUE does: hex,
// octal and binary integers, multipliers such as 1Ki).
func literalProblem(lit *ast.BasicLit) string {
	if lit.Kind != token.FLOAT && lit.Kind != token.INT {
		return ""
	}
	v := strings.ReplaceAll(lit.Value, "_", "")
	if strings.ContainsAny(v, "xXoObBKMGTPi") {
		return ""
	}
	return numberProblem(v)
}

// exprLiteralProblem checks the number literals of a --set value.
func exprLiteralProblem(e ast.Expr) string {
	msg := ""
	ast.Walk(e, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && msg == "" {
			msg = literalProblem(lit)
		}
		return msg == ""
	}, nil)
	return msg
}
