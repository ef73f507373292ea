package runtime

import "testing"

// TestScorerCompilesPastGoMLXCacheLimit scores 36 distinct (rows, length) buckets with one
// scorer: GoMLX's default executor refuses its 33rd shape, which would stop a long run whose
// lengths vary (or a packed one) midway.
func TestScorerCompilesPastGoMLXCacheLimit(t *testing.T) {
	b := testBackend(t)
	m, err := NewModel(smallGQA(), 3)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	shapes := 0
	for rows := 1; rows <= 256; rows *= 2 {
		for _, length := range []int{16, 32, 64, 128} {
			seqs := make([][]int32, rows)
			for i := range seqs {
				seqs[i] = make([]int32, length)
				for j := range seqs[i] {
					seqs[i][j] = int32(2 + (i+j)%40)
				}
			}
			if _, err := sc.Score(seqs); err != nil {
				t.Fatalf("shape %d (%d rows × %d): %v", shapes+1, rows, length, err)
			}
			shapes++
		}
	}
	if shapes <= 32 {
		t.Fatalf("only %d shapes: the test must pass GoMLX's default limit of 32", shapes)
	}
}
