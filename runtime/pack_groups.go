package runtime

import "fmt"

// Token-budget micro-batches: with packing, a micro-batch is a fixed number of packed rows of a
// fixed length (rows × L tokens), and it holds as many sequences as those rows take, instead of
// a fixed number of sequences. A mini-batch of short sequences then runs in fewer, fuller
// micro-batches (verl's use_dynamic_bsz, TRL's padding-free packing).

// packRowFloor is the largest row bucket (packRowBucket: 1, 2, 3, 4, 6, 8, 12, …) ≤ n, for
// n ≥ 1: the unit counts of PackGroups' micro-batches on the ladder, so that a run compiles few
// graphs (an executor caches at most 32).
func packRowFloor(n int) int {
	best := 1
	for b := 1; b <= n; b *= 2 {
		best = b
		if b >= 2 && b+b/2 <= n {
			best = b + b/2
		}
	}
	return best
}

// fitsRows reports whether first-fit decreasing packs the sequences into rows rows of L tokens.
// When first fit opens a row for a sequence of n tokens, every open row has fewer than n free, so
// m rows hold more than (m−1)·(L−longest) tokens: a total of at most rows·(L−longest+1) always
// fits, and most checks of short sequences need no packing at all.
func fitsRows(lengths []int, rows, L int) bool {
	total, longest := 0, 0
	for _, n := range lengths {
		total += n
		longest = max(longest, n)
	}
	switch {
	case total > rows*L:
		return false
	case total <= rows*(L-longest+1):
		return true
	}
	_, used := firstFitDecreasing(lengths, L)
	return used <= rows
}

// RowBucket rounds a count of sequences (or units) up to the ladder of packed row counts (1, 2,
// 3, 4, 6, 8, 12, …): a token-budget micro-batch of n units is laid out as RowBucket(n) units,
// the extra ones empty, so that a run compiles few graphs.
func RowBucket(n int) int { return packRowBucket(n) }

// PackGroups cuts sequences of the given lengths, in order, into token-budget micro-batches: each
// takes the most consecutive units (groups of unit sequences that must share a micro-batch: a
// preference pair, a state's candidates) whose sequences pack (first-fit decreasing, as Pack)
// into rows rows of L tokens; the units left over start the next micro-batch. With onLadder the
// count is then rounded down to the row ladder (RowBucket's), for losses that cannot take the
// empty units that otherwise round it up (a preference pair of two empty rows still has a loss).
// Sequences are never split or reordered across micro-batches, and the cut depends on the lengths
// alone: the same mini-batch always gives the same micro-batches (deterministic and resume-safe).
// It returns the half-open unit ranges.
func PackGroups(lengths []int, unit, rows, L int, onLadder bool) ([][2]int, error) {
	switch {
	case unit < 1 || len(lengths)%unit != 0:
		return nil, fmt.Errorf("pack groups: %d sequences do not form units of %d", len(lengths), unit)
	case L <= 0:
		return nil, fmt.Errorf("pack groups: rows of %d tokens, want > 0", L)
	case rows < 1:
		return nil, fmt.Errorf("pack groups: %d rows per micro-batch, want > 0", rows)
	}
	for i, n := range lengths {
		if n < 0 || n > L {
			return nil, fmt.Errorf("pack groups: sequence %d has %d tokens, outside [0, %d] (raise pack_tokens, or set pack: false)", i, n, L)
		}
	}
	units := len(lengths) / unit
	var out [][2]int
	for lo := 0; lo < units; {
		k := 0 // units from lo whose sequences fit, every prefix checked
		for lo+k < units {
			if !fitsRows(lengths[lo*unit:(lo+k+1)*unit], rows, L) {
				break
			}
			k++
		}
		if k == 0 {
			return nil, fmt.Errorf("pack groups: the %d sequences of unit %d need more than %d rows of %d tokens", unit, lo, rows, L)
		}
		if onLadder {
			k = packRowFloor(k)
		}
		out = append(out, [2]int{lo, lo + k})
		lo += k
	}
	return out, nil
}

// BudgetCut is a mini-batch cut into token-budget micro-batches: the unit ranges of Groups, each
// packed into at most Rows rows of Length tokens.
type BudgetCut struct {
	Groups       [][2]int
	Rows, Length int
}

// CutByTokens cuts sequences of the given lengths (each ≤ T, the mini-batch's padded length) into
// micro-batches (PackGroups) of rows packed rows of L tokens. L = 0 keeps the token budget of an
// unpacked micro-batch, rows·T, and picks its rows: rows of T, or of 2T or 4T (up to
// autoPackMaxLength tokens) with a half or a quarter as many, whichever computes the fewest slots
// over the mini-batch (ties: the shorter rows, whose attention costs less). Rows of T pack nothing
// when no two sequences fit in T together (a batch of sequences just over T/2 long); longer rows
// then hold several. Each micro-batch counts its units rounded up to the row ladder (RowBucket)
// unless onLadder, as lmBatches lays them out.
func CutByTokens(lengths []int, unit, rows, T, L int, onLadder bool) (BudgetCut, error) {
	if L > 0 {
		groups, err := PackGroups(lengths, unit, rows, L, onLadder)
		return BudgetCut{Groups: groups, Rows: rows, Length: L}, err
	}
	var best BudgetCut
	bestSlots := -1
	for L := T; L <= 4*T && (L == T || L <= autoPackMaxLength); L *= 2 {
		r := rows * T / L
		if r < 1 || r*L != rows*T {
			break // the budget is not a whole number of such rows
		}
		groups, err := PackGroups(lengths, unit, r, L, onLadder)
		if err != nil {
			if L == T {
				return BudgetCut{}, err
			}
			break // a unit does not fit in fewer, longer rows
		}
		slots := 0
		for _, g := range groups {
			seqs := lengths[g[0]*unit : g[1]*unit]
			laid := len(seqs)
			if !onLadder {
				laid = RowBucket(g[1]-g[0]) * unit
			}
			_, used := firstFitDecreasing(seqs, L)
			slots += packedRows(used, laid, r) * L
		}
		if bestSlots < 0 || slots < bestSlots {
			best, bestSlots = BudgetCut{Groups: groups, Rows: r, Length: L}, slots
		}
	}
	return best, nil
}
