package runtime

import "fmt"

// Sequence lengths are padded up to a small set of buckets so that a run compiles a handful of
// graphs rather than one per batch shape (each is compiled once and kept: shapecache.go).
var lengthBuckets = []int{16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192}

// BucketLength returns the smallest length bucket ≥ n.
func BucketLength(n int) int {
	for _, b := range lengthBuckets {
		if n <= b {
			return b
		}
	}
	// Past the table: round up to a multiple of the largest bucket.
	last := lengthBuckets[len(lengthBuckets)-1]
	return (n + last - 1) / last * last
}

// BucketBatch returns the smallest power of two ≥ n (batch sizes are bucketed too).
func BucketBatch(n int) int {
	b := 1
	for b < n {
		b *= 2
	}
	return b
}

// PadTokens copies ragged rows into a dense [rows][length] int32 matrix, right-padded with pad,
// and returns it with a 0/1 mask of real tokens. rows may be fewer than len(seqs)'s bucket: the
// extra rows are all padding.
func PadTokens(seqs [][]int32, rows, length int, pad int32) (tokens []int32, mask []float32, err error) {
	if len(seqs) > rows {
		return nil, nil, fmt.Errorf("padding %d sequences into %d rows", len(seqs), rows)
	}
	tokens = make([]int32, rows*length)
	mask = make([]float32, rows*length)
	for i := range tokens {
		tokens[i] = pad
	}
	for r, s := range seqs {
		if len(s) > length {
			return nil, nil, fmt.Errorf("sequence %d has %d tokens, more than the padded length %d", r, len(s), length)
		}
		copy(tokens[r*length:], s)
		for t := range s {
			mask[r*length+t] = 1
		}
	}
	return tokens, mask, nil
}

// ShiftTargets returns next-token targets for right-padded tokens [rows, length]: targets[r,t] =
// tokens[r,t+1] and a mask that is 1 where both positions are real tokens. The shift is done on
// the host because Slice's gradient needs Pad, which SimpleGo lacks.
func ShiftTargets(tokens []int32, mask []float32, rows, length int, pad int32) (targets []int32, tmask []float32) {
	targets = make([]int32, len(tokens))
	tmask = make([]float32, len(tokens))
	for r := range rows {
		for t := range length {
			i := r*length + t
			if t+1 < length {
				targets[i] = tokens[i+1]
				tmask[i] = mask[i] * mask[i+1]
			} else {
				targets[i] = pad
			}
		}
	}
	return targets, tmask
}
