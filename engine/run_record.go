package engine

import (
	"encoding/json"
	"fmt"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/format"

	"stx.dev/stx/schema"
)

// logEpisodes writes up to 8 sampled rows of rollout id to episodes.jsonl.
func (l *loop) logEpisodes(id int, b *batch) error {
	if b.wf != nil {
		return b.wf.logEpisodes(l, id)
	}
	d := b.data
	for i := 0; i < d.Len() && i < 8; i++ {
		ep := map[string]any{"rollout": id, "task_id": d.TaskID[i], "reward": d.Reward[i]}
		if i < len(l.rowAdv) {
			ep["advantage"] = l.rowAdv[i]
		}
		if i < len(b.exs) && b.exs[i].Prompt != "" {
			ep["prompt"] = b.exs[i].Prompt
		}
		if i < len(b.completions) {
			ep["completion"] = b.completions[i]
		} else if l.gen.tok != nil {
			ep["completion"] = l.gen.tok.Decode(d.Tokens[i][d.PromptLen[i]:])
		}
		if err := l.dir.LogEpisode(ep); err != nil {
			return err
		}
	}
	return nil
}

// RecipeCUE renders a resolved recipe as the CUE text `stx export` prints.
func RecipeCUE(r *schema.Recipe) ([]byte, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Name, err)
	}
	v := cuecontext.New().CompileBytes(data)
	expr, ok := v.Syntax(cue.Concrete(true)).(ast.Expr)
	if !ok {
		return nil, fmt.Errorf("render %s: not an expression", r.Name)
	}
	file := &ast.File{Decls: []ast.Decl{
		&ast.Package{Name: ast.NewIdent("stx")},
		&ast.Field{Label: ast.NewIdent("recipes"), Value: ast.NewStruct(&ast.Field{Label: ast.NewIdent(r.Name), Value: expr})},
	}}
	out, err := format.Node(file)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Name, err)
	}
	return out, nil
}
