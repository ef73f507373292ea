// Package rollout is the data that the engine's rollout side, the specializations and the
// estimators pass to each other: Rollout, a columnar table of sequences, and the data keys
// naming its columns. It is the ground floor of the training side and imports nothing of stx,
// so that every package above it can share one definition of each key.
package rollout

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
)

// Rollout is the columnar rollout data shared by the engine, the specializations and the
// estimators. A row is one sequence: one model call's prompt followed by its response. A
// multi-step trajectory occupies several rows that share a Traj value.
//
// Tokens defines the number of rows. Every other column is either nil (absent) or has exactly
// one entry per row; per-token columns (Mask and every Tok column) have, in each row, exactly as
// many entries as that row's Tokens. Validate checks all of this.
type Rollout struct {
	// Tokens is the full token sequence of each row (prompt then response).
	Tokens [][]int32
	// PromptLen is the number of prompt tokens at the start of each row.
	PromptLen []int
	// Mask is 1 for trainable response tokens and 0 for prompt, observation and padding tokens.
	Mask [][]float32
	// Reward is the scalar reward of each row's trajectory, broadcast to all its rows.
	Reward []float64
	// GroupID identifies the advantage group (task id and role) of each row.
	GroupID []string
	// TaskID is the task (prompt instance) of each row.
	TaskID []string
	// Role is the role name that produced each row.
	Role []string
	// DataSource names the dataset each row's task comes from.
	DataSource []string
	// Traj is the trajectory index of each row; rows of one trajectory are consecutive, in step order.
	Traj []int
	// Tok holds per-token float columns keyed by data key (KeyLogProbs, KeyAdvantages, ...).
	Tok map[string][][]float32
	// Row holds per-row float columns keyed by data key (KeyChosen, KeyLabel, KeyIsCorrect, ...).
	Row map[string][]float64
}

// Len returns the number of rows.
func (r *Rollout) Len() int {
	if r == nil {
		return 0
	}
	return len(r.Tokens)
}

// Validate checks that every present column has one entry per row and that every per-token
// column matches the row lengths of Tokens. The error names the offending column and row.
func (r *Rollout) Validate() error {
	n := r.Len()
	checkRows := func(name string, l int) error {
		if l != n {
			return fmt.Errorf("rollout column %q has %d rows, want %d (rows of tokens)", name, l, n)
		}
		return nil
	}
	if r.PromptLen != nil {
		if err := checkRows("prompt_len", len(r.PromptLen)); err != nil {
			return err
		}
		for i, p := range r.PromptLen {
			if p < 0 || p > len(r.Tokens[i]) {
				return fmt.Errorf("rollout column \"prompt_len\" row %d: %d is outside [0, %d]", i, p, len(r.Tokens[i]))
			}
		}
	}
	if r.Mask != nil {
		if err := checkTokenColumn("mask", r.Mask, r.Tokens); err != nil {
			return err
		}
	}
	if r.Reward != nil {
		if err := checkRows("reward", len(r.Reward)); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		name string
		col  []string
	}{{"group_id", r.GroupID}, {"task_id", r.TaskID}, {"role", r.Role}, {"data_source", r.DataSource}} {
		if c.col != nil {
			if err := checkRows(c.name, len(c.col)); err != nil {
				return err
			}
		}
	}
	if r.Traj != nil {
		if err := checkRows("traj", len(r.Traj)); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Tok)) {
		if err := checkTokenColumn(k, r.Tok[k], r.Tokens); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Row)) {
		if err := checkRows(k, len(r.Row[k])); err != nil {
			return err
		}
	}
	return nil
}

func checkTokenColumn(name string, col [][]float32, tokens [][]int32) error {
	if len(col) != len(tokens) {
		return fmt.Errorf("rollout column %q has %d rows, want %d (rows of tokens)", name, len(col), len(tokens))
	}
	for i := range col {
		if len(col[i]) != len(tokens[i]) {
			return fmt.Errorf("rollout column %q row %d has %d tokens, want %d", name, i, len(col[i]), len(tokens[i]))
		}
	}
	return nil
}

// SetTok sets the per-token column key after checking its shape against Tokens.
func (r *Rollout) SetTok(key string, col [][]float32) error {
	if err := checkTokenColumn(key, col, r.Tokens); err != nil {
		return err
	}
	if r.Tok == nil {
		r.Tok = map[string][][]float32{}
	}
	r.Tok[key] = col
	return nil
}

// SetRow sets the per-row column key after checking that it has one value per row.
func (r *Rollout) SetRow(key string, col []float64) error {
	if len(col) != r.Len() {
		return fmt.Errorf("rollout column %q has %d rows, want %d (rows of tokens)", key, len(col), r.Len())
	}
	if r.Row == nil {
		r.Row = map[string][]float64{}
	}
	r.Row[key] = col
	return nil
}

// Select returns a new Rollout holding the given rows, in the given order (repeats allowed).
// Every slice is copied, so mutating the result never changes r.
func (r *Rollout) Select(indices []int) (*Rollout, error) {
	n := r.Len()
	for _, i := range indices {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("rollout select: row %d out of range [0, %d)", i, n)
		}
	}
	return r.selectRows(indices), nil
}

// selectRows is Select for indices already known to be in range.
func (r *Rollout) selectRows(indices []int) *Rollout {
	out := &Rollout{Tokens: make([][]int32, len(indices))}
	for j, i := range indices {
		out.Tokens[j] = slices.Clone(r.Tokens[i])
	}
	out.PromptLen = pick(r.PromptLen, indices)
	out.Reward = pick(r.Reward, indices)
	out.GroupID = pick(r.GroupID, indices)
	out.TaskID = pick(r.TaskID, indices)
	out.Role = pick(r.Role, indices)
	out.DataSource = pick(r.DataSource, indices)
	out.Traj = pick(r.Traj, indices)
	out.Mask = pickRows(r.Mask, indices)
	if r.Tok != nil {
		out.Tok = make(map[string][][]float32, len(r.Tok))
		for k, col := range r.Tok {
			out.Tok[k] = pickRows(col, indices)
		}
	}
	if r.Row != nil {
		out.Row = make(map[string][]float64, len(r.Row))
		for k, col := range r.Row {
			out.Row[k] = pick(col, indices)
		}
	}
	return out
}

// pick copies the selected entries of a per-row column; an absent (nil) column stays absent.
func pick[T any](col []T, indices []int) []T {
	if col == nil {
		return nil
	}
	out := make([]T, len(indices))
	for j, i := range indices {
		out[j] = col[i]
	}
	return out
}

func pickRows(col [][]float32, indices []int) [][]float32 {
	if col == nil {
		return nil
	}
	out := make([][]float32, len(indices))
	for j, i := range indices {
		out[j] = slices.Clone(col[i])
	}
	return out
}

// Permutation returns the row order Shuffle(seed) uses: a deterministic permutation of
// [0, Len()) drawn from a PCG generator seeded with seed.
func (r *Rollout) Permutation(seed uint64) []int {
	// The second PCG word is a fixed odd constant so that a single uint64 seed (what the outer
	// loop derives from rollout id and pass) fully determines the order.
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	return rng.Perm(r.Len())
}

// Shuffle returns a copy of r with its rows in the order Permutation(seed) gives: the same seed
// always gives the same order.
func (r *Rollout) Shuffle(seed uint64) *Rollout {
	return r.selectRows(r.Permutation(seed))
}

// Groups returns the row indices of each distinct GroupID, groups in order of first appearance.
// Without a GroupID column every row is its own group.
func (r *Rollout) Groups() [][]int {
	if r.GroupID == nil {
		out := make([][]int, r.Len())
		for i := range out {
			out[i] = []int{i}
		}
		return out
	}
	pos := map[string]int{}
	var out [][]int
	for i, g := range r.GroupID {
		j, ok := pos[g]
		if !ok {
			j = len(out)
			pos[g] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// Concat returns a new Rollout with the rows of every part, in order. Parts with no rows are
// skipped; the others must carry the same set of columns (the error names the first column that
// differs). Traj values of each later part are shifted past the largest Traj of the parts before
// it, so that trajectories of different rollouts never merge.
func Concat(parts ...*Rollout) (*Rollout, error) {
	var nonEmpty []*Rollout
	for _, p := range parts {
		if p.Len() > 0 {
			nonEmpty = append(nonEmpty, p)
		}
	}
	if len(nonEmpty) == 0 {
		return &Rollout{}, nil
	}
	first := nonEmpty[0]
	for i, p := range nonEmpty {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("concat part %d: %w", i, err)
		}
		if err := sameColumns(first, p); err != nil {
			return nil, fmt.Errorf("concat part %d: %w", i, err)
		}
	}
	out := &Rollout{}
	trajOffset := 0
	for _, p := range nonEmpty {
		all := make([]int, p.Len())
		for i := range all {
			all[i] = i
		}
		c := p.selectRows(all)
		out.Tokens = append(out.Tokens, c.Tokens...)
		out.PromptLen = appendCol(out.PromptLen, c.PromptLen)
		out.Mask = appendCol(out.Mask, c.Mask)
		out.Reward = appendCol(out.Reward, c.Reward)
		out.GroupID = appendCol(out.GroupID, c.GroupID)
		out.TaskID = appendCol(out.TaskID, c.TaskID)
		out.Role = appendCol(out.Role, c.Role)
		out.DataSource = appendCol(out.DataSource, c.DataSource)
		if c.Traj != nil {
			maxT := -1
			for i := range c.Traj {
				maxT = max(maxT, c.Traj[i])
				c.Traj[i] += trajOffset
			}
			out.Traj = append(out.Traj, c.Traj...)
			trajOffset += maxT + 1
		}
		for k, col := range c.Tok {
			if out.Tok == nil {
				out.Tok = map[string][][]float32{}
			}
			out.Tok[k] = append(out.Tok[k], col...)
		}
		for k, col := range c.Row {
			if out.Row == nil {
				out.Row = map[string][]float64{}
			}
			out.Row[k] = append(out.Row[k], col...)
		}
	}
	return out, nil
}

// appendCol appends b to a keeping "absent" (nil) distinct from "present with no rows".
func appendCol[T any](a, b []T) []T {
	if b == nil {
		return a
	}
	if a == nil {
		a = make([]T, 0, len(b))
	}
	return append(a, b...)
}

func sameColumns(a, b *Rollout) error {
	fixed := []struct {
		name   string
		ha, hb bool
	}{
		{"prompt_len", a.PromptLen != nil, b.PromptLen != nil},
		{"mask", a.Mask != nil, b.Mask != nil},
		{"reward", a.Reward != nil, b.Reward != nil},
		{"group_id", a.GroupID != nil, b.GroupID != nil},
		{"task_id", a.TaskID != nil, b.TaskID != nil},
		{"role", a.Role != nil, b.Role != nil},
		{"data_source", a.DataSource != nil, b.DataSource != nil},
		{"traj", a.Traj != nil, b.Traj != nil},
	}
	for _, f := range fixed {
		if f.ha != f.hb {
			return fmt.Errorf("column %q is present in one part and absent in another", f.name)
		}
	}
	if err := sameKeys(a.Tok, b.Tok); err != nil {
		return err
	}
	return sameKeys(a.Row, b.Row)
}

func sameKeys[V any](a, b map[string]V) error {
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[k]; !ok {
			return fmt.Errorf("column %q is present in one part and absent in another", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			return fmt.Errorf("column %q is present in one part and absent in another", k)
		}
	}
	return nil
}
