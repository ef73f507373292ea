package specializations

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime"
	"stx.dev/stx/specializations/loss"
)

// Host-side layout of a language-model micro-batch (keys of the maps PrepareBatch returns).
//
// Rollout per-token columns are aligned with Tokens: column[t] describes token t (e.g. its
// log-prob given tokens < t). In the graph, position t of the [rows, T] tensors predicts
// token t+1, so every per-token column is shifted by one on the host (position t holds
// column[t+1]); token 0 is never predicted. The shift happens on the host because Slice's
// gradient needs Pad, which SimpleGo lacks.
const (
	bTokens    = rollout.KeyTokens   // int32 [R,T] input ids, right-padded
	bTargets   = "targets"           // int32 [R,T] next-token ids
	bLossMask  = rollout.KeyLossMask // float32 [R,T] 1 where the target token is trainable
	bLastToken = "last_token"        // float32 [R,T] one-hot at the last real input position
	bDenTokens = "den_tokens"        // scalar N of the whole mini-batch, for loss_agg_mode "token-mean"
	bDenSeqs   = "den_seqs"          // scalar B' of the whole mini-batch
	bDenRows   = "den_rows"          // scalar B of the whole mini-batch
	bCount     = "den_count"         // scalar: pairs, examples, samples or entries of the mini-batch
	// bChosenTokens is the scalar count of the chosen answers' target tokens in the mini-batch
	// (the token mean of a preference loss's sft term).
	bChosenTokens = "den_chosen_tokens"
)

// Wide columns hold a vector per token (Tok) or per row (Row) as one column per component,
// named "<key>/<i>": the Rollout's columns are scalars per token or per row.

// WideName is the column name of component i of a wide column.
func WideName(key string, i int) string { return key + "/" + strconv.Itoa(i) }

// SetTokenVectors stores v[row][token][i] as the wide per-token column key.
func SetTokenVectors(r *rollout.Rollout, key string, v [][][]float32) error {
	if len(v) != r.Len() {
		return fmt.Errorf("wide column %q: %d rows, want %d", key, len(v), r.Len())
	}
	dim := -1
	for b, row := range v {
		if len(row) != len(r.Tokens[b]) {
			return fmt.Errorf("wide column %q row %d: %d tokens, want %d", key, b, len(row), len(r.Tokens[b]))
		}
		for _, x := range row {
			if dim < 0 {
				dim = len(x)
			} else if len(x) != dim {
				return fmt.Errorf("wide column %q: vectors of sizes %d and %d", key, dim, len(x))
			}
		}
	}
	if dim <= 0 {
		return fmt.Errorf("wide column %q: no vector to store", key)
	}
	if r.Tok == nil {
		r.Tok = map[string][][]float32{}
	}
	for i := range dim {
		col := make([][]float32, len(v))
		for b, row := range v {
			col[b] = make([]float32, len(row))
			for t, x := range row {
				col[b][t] = x[i]
			}
		}
		r.Tok[WideName(key, i)] = col
	}
	return nil
}

// SetRowVectors stores v[row][i] as the wide per-row column key.
func SetRowVectors(r *rollout.Rollout, key string, v [][]float32) error {
	if len(v) != r.Len() || len(v) == 0 {
		return fmt.Errorf("wide column %q: %d rows, want %d (> 0)", key, len(v), r.Len())
	}
	dim := len(v[0])
	if r.Row == nil {
		r.Row = map[string][]float64{}
	}
	for i := range dim {
		col := make([]float64, len(v))
		for b, x := range v {
			if len(x) != dim {
				return fmt.Errorf("wide column %q: row %d has %d components, want %d", key, b, len(x), dim)
			}
			col[b] = float64(x[i])
		}
		r.Row[WideName(key, i)] = col
	}
	return nil
}

// wideDim counts the consecutive components key/0, key/1, ... present in m.
func wideDim[V any](m map[string]V, key string) int {
	n := 0
	for {
		if _, ok := m[WideName(key, n)]; !ok {
			return n
		}
		n++
	}
}

// has reports whether the rollout holds the data key k, wherever that key lives.
func has(r *rollout.Rollout, k string) bool {
	switch k {
	case rollout.KeyTokens:
		return r.Tokens != nil
	case rollout.KeyLossMask:
		return r.Mask != nil
	case rollout.KeyRewards:
		return r.Reward != nil
	case rollout.KeyChosen, rollout.KeyLabel, rollout.KeyExecutedBy:
		_, ok := r.Row[k]
		return ok
	case rollout.KeySamples, rollout.KeyTrajectories:
		return wideDim(r.Row, k) > 0
	case rollout.KeyTeacherLogits:
		return wideDim(r.Tok, k) > 0
	}
	_, ok := r.Tok[k]
	if !ok {
		_, ok = r.Row[k]
	}
	return ok
}

// requireKeys checks the rollout against a contract's Requires and validates it; the error
// names the first missing key.
func requireKeys(name string, r *rollout.Rollout, keys []string) error {
	if r == nil {
		return fmt.Errorf("%s: no rollout", name)
	}
	for _, k := range keys {
		if !has(r, k) {
			return fmt.Errorf("%s: the rollout has no %q column (required by the specialization)", name, k)
		}
	}
	if r.Len() == 0 {
		return fmt.Errorf("%s: empty rollout", name)
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// chunks cuts n units into consecutive ranges of at most size (0 = one range).
func chunks(n, size int) [][2]int {
	if size <= 0 || size > n {
		size = n
	}
	var out [][2]int
	for lo := 0; lo < n; lo += size {
		out = append(out, [2]int{lo, min(lo+size, n)})
	}
	return out
}

// seqLength is the padded length of the rows' tokens: a bucket, so that few graphs compile.
func seqLength(r *rollout.Rollout) int {
	n := 1
	for _, t := range r.Tokens {
		n = max(n, len(t))
	}
	return runtime.BucketLength(n)
}

func scalarF32(v float64) *tensors.Tensor { return tensors.FromScalar(float32(v)) }

// lmInputs builds the forward keys of rows: tokens, targets, loss mask and last-token
// one-hot, all [len(rows), T].
func lmInputs(r *rollout.Rollout, rows []int, T int, pad int32) map[string]*tensors.Tensor {
	R := len(rows)
	tok := make([]int32, R*T)
	tgt := make([]int32, R*T)
	last := make([]float32, R*T)
	for i := range tok {
		tok[i], tgt[i] = pad, pad
	}
	for i, row := range rows {
		s := r.Tokens[row]
		copy(tok[i*T:], s)
		if len(s) > 1 {
			copy(tgt[i*T:], s[1:])
		}
		if len(s) > 0 {
			last[i*T+len(s)-1] = 1
		}
	}
	return map[string]*tensors.Tensor{
		bTokens:    tensors.FromFlatDataAndDimensions(tok, R, T),
		bTargets:   tensors.FromFlatDataAndDimensions(tgt, R, T),
		bLossMask:  shiftedTok(r.Mask, rows, T),
		bLastToken: tensors.FromFlatDataAndDimensions(last, R, T),
	}
}

// shiftedTok lays a per-token column out in target positions: [R,T] with position t
// holding col[row][t+1].
func shiftedTok(col [][]float32, rows []int, T int) *tensors.Tensor {
	out := make([]float32, len(rows)*T)
	for i, row := range rows {
		if len(col[row]) > 1 {
			copy(out[i*T:(i+1)*T], col[row][1:])
		}
	}
	return tensors.FromFlatDataAndDimensions(out, len(rows), T)
}

// shiftedIDs is shiftedTok for a column of token ids stored as floats.
func shiftedIDs(col [][]float32, rows []int, T int, pad int32) *tensors.Tensor {
	out := make([]int32, len(rows)*T)
	for i := range out {
		out[i] = pad
	}
	for i, row := range rows {
		for t := 1; t < len(col[row]) && t <= T; t++ {
			out[i*T+t-1] = int32(col[row][t])
		}
	}
	return tensors.FromFlatDataAndDimensions(out, len(rows), T)
}

// shiftedWide lays a wide per-token column out as [R,T,dim] in target positions.
func shiftedWide(r *rollout.Rollout, key string, rows []int, T int) *tensors.Tensor {
	dim := wideDim(r.Tok, key)
	out := make([]float32, len(rows)*T*dim)
	for c := range dim {
		col := r.Tok[WideName(key, c)]
		for i, row := range rows {
			for t := 1; t < len(col[row]) && t <= T; t++ {
				out[(i*T+t-1)*dim+c] = col[row][t]
			}
		}
	}
	return tensors.FromFlatDataAndDimensions(out, len(rows), T, dim)
}

// rowValues lays a per-row column out as [R].
func rowValues(col []float64, rows []int) *tensors.Tensor {
	out := make([]float32, len(rows))
	for i, row := range rows {
		out[i] = float32(col[row])
	}
	return tensors.FromFlatDataAndDimensions(out, len(rows))
}

// shiftedMasks returns the target-position masks of rows (for loss_agg_mode counts).
func shiftedMasks(mask [][]float32, rows []int) [][]float32 {
	out := make([][]float32, len(rows))
	for i, row := range rows {
		if len(mask[row]) > 1 {
			out[i] = mask[row][1:]
		} else {
			out[i] = []float32{}
		}
	}
	return out
}

// denominators puts the mini-batch's loss_agg_mode counts into every micro-batch.
func denominators(mbs []map[string]*tensors.Tensor, c loss.Counts) {
	for _, mb := range mbs {
		mb[bDenTokens] = scalarF32(float64(c.Tokens))
		mb[bDenSeqs] = scalarF32(float64(c.Sequences))
		mb[bDenRows] = scalarF32(float64(c.Rows))
	}
}

// span lists the integers [lo, hi).
func span(lo, hi int) []int {
	out := make([]int, hi-lo)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

// tokToFloat64 converts a per-token column to float64 rows.
func tokToFloat64(col [][]float32) [][]float64 {
	out := make([][]float64, len(col))
	for b, row := range col {
		out[b] = make([]float64, len(row))
		for t, v := range row {
			out[b][t] = float64(v)
		}
	}
	return out
}

// shallowCopy copies a rollout's column maps so that new columns do not leak into the caller's.
func shallowCopy(r *rollout.Rollout) *rollout.Rollout {
	c := *r
	c.Tok = make(map[string][][]float32, len(r.Tok)+2)
	for k, v := range r.Tok {
		c.Tok[k] = v
	}
	c.Row = make(map[string][]float64, len(r.Row)+1)
	for k, v := range r.Row {
		c.Row[k] = v
	}
	return &c
}

// packInto adds the packed layout (runtime.PackRows) of the micro-batch's rows, laid out as
// [laid, T] in mb (laid ≥ len(rows): the rows after len(rows) are empty, see padRows), into at most
// maxRows rows (0: one per sequence) of budget tokens (0: runtime.PackAuto's choice).
func packInto(mb map[string]*tensors.Tensor, r *rollout.Rollout, rows []int, laid, T, budget, maxRows int) error {
	lengths := make([]int, laid)
	for i, row := range rows {
		lengths[i] = len(r.Tokens[row])
	}
	if maxRows <= 0 {
		maxRows = laid
	}
	var p *runtime.Packing
	var err error
	if budget > 0 {
		for i, row := range rows {
			if lengths[i] > budget { // named by its row of the mini-batch, which the user can find
				return fmt.Errorf("row %d has %d tokens, more than pack_tokens %d (raise pack_tokens, or set pack: false)", row, lengths[i], budget)
			}
		}
		p, err = runtime.PackRows(lengths, T, budget, maxRows)
	} else {
		p, err = runtime.PackAuto(lengths, T)
	}
	if err != nil {
		return err
	}
	for k, t := range p.Tensors() {
		mb[k] = t
	}
	return nil
}

// padRows extends every per-row tensor of mb (first axis R) to laid rows with zeros: empty rows
// (no tokens, mask 0, every per-row and per-token value 0) that round a token-budget
// micro-batch's row count up to the ladder, so that few shapes compile. Their tokens (id 0) are
// never computed: packed, an empty row takes no slot.
func padRows(mb map[string]*tensors.Tensor, R, laid int) {
	if laid == R {
		return
	}
	for k, t := range mb {
		dims := t.Shape().Dimensions
		if len(dims) == 0 || dims[0] != R {
			continue
		}
		wide := slices.Clone(dims)
		wide[0] = laid
		out := tensors.FromShape(shapes.Make(t.DType(), wide...))
		t.ConstBytes(func(src []byte) {
			out.MutableBytes(func(dst []byte) { copy(dst, src) })
		})
		mb[k] = out
	}
}
