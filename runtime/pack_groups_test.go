package runtime

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestPackRowFloorIsTheLadderBelow(t *testing.T) {
	want := map[int]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 4, 6: 6, 7: 6, 8: 8, 11: 8, 12: 12, 15: 12, 16: 16, 23: 16, 24: 24, 47: 32, 48: 48, 100: 96}
	for n, w := range want {
		if got := packRowFloor(n); got != w {
			t.Errorf("packRowFloor(%d) = %d, want %d", n, got, w)
		}
		if packRowBucket(w) != w {
			t.Errorf("packRowFloor(%d) = %d is not a row bucket", n, w)
		}
	}
}

// TestFitsRowsAgreesWithFirstFitDecreasing: the shortcut that skips packing short sequences
// answers as packing them does.
func TestFitsRowsAgreesWithFirstFitDecreasing(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	for range 3000 {
		L := 4 + rng.IntN(60)
		rows := 1 + rng.IntN(5)
		lengths := make([]int, 1+rng.IntN(20))
		for i := range lengths {
			lengths[i] = 1 + rng.IntN(L)
		}
		_, used := firstFitDecreasing(lengths, L)
		if got := fitsRows(lengths, rows, L); got != (used <= rows) {
			t.Fatalf("lengths %v in %d rows of %d: fitsRows %v, first-fit decreasing uses %d rows", lengths, rows, L, got, used)
		}
	}
}

func TestPackGroups(t *testing.T) {
	cases := []struct {
		name          string
		lengths       []int
		unit, rows, L int
		onLadder      bool
		want          [][2]int
		err           string
	}{
		// 12 sequences of 5 tokens: 3 per row of 16, 6 per micro-batch of 2 rows.
		{"short rows share micro-batches", slices.Repeat([]int{5}, 12), 1, 2, 16, false, [][2]int{{0, 6}, {6, 12}}, ""},
		// 7 fit in a row of 35: all 7 take it, or on the ladder 6, and the 7th starts the next.
		{"as many as fit", slices.Repeat([]int{5}, 9), 1, 1, 35, false, [][2]int{{0, 7}, {7, 9}}, ""},
		{"counts on the ladder", slices.Repeat([]int{5}, 9), 1, 1, 35, true, [][2]int{{0, 6}, {6, 9}}, ""},
		{"long rows one per row", []int{16, 16, 16}, 1, 2, 16, false, [][2]int{{0, 2}, {2, 3}}, ""},
		// Pairs stay whole: 4 sequences of 8 per 2 rows of 16 = 2 pairs.
		{"pairs stay together", slices.Repeat([]int{8}, 10), 2, 2, 16, true, [][2]int{{0, 2}, {2, 4}, {4, 5}}, ""},
		{"every sequence in one", []int{3, 9, 1, 4}, 1, 4, 16, false, [][2]int{{0, 4}}, ""},
		{"longer than a row", []int{4, 17}, 1, 2, 16, false, nil, "sequence 1 has 17 tokens"},
		{"broken units", []int{4, 4, 4}, 2, 2, 16, false, nil, "do not form units of 2"},
		{"a pair sharing a row", []int{4, 4, 9, 9}, 2, 1, 16, false, [][2]int{{0, 1}}, "the 2 sequences of unit 1 need more than 1 rows of 16 tokens"},
		{"pairs in one row", []int{4, 4, 3, 3}, 2, 1, 16, false, [][2]int{{0, 2}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PackGroups(tc.lengths, tc.unit, tc.rows, tc.L, tc.onLadder)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("groups %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPackGroupsCoverInOrderAndFit: on random mini-batches the micro-batches cover every unit once,
// in order, each packing into its rows (PackRows accepts it, with the empty units that round it up
// to the ladder) and, onLadder, on the row ladder; the same lengths give the same cut; and short
// sequences run in fewer micro-batches than the unpacked count of rows/unit units each.
func TestPackGroupsCoverInOrderAndFit(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 2))
	fewer := 0
	for trial := range 200 {
		unit := 1 + rng.IntN(2)
		rows := unit * (1 + rng.IntN(4))
		L := 16 << rng.IntN(3)
		lengths := make([]int, unit*(1+rng.IntN(30)))
		for i := range lengths {
			lengths[i] = 1 + rng.IntN(L)
			if trial%2 == 0 {
				lengths[i] = 1 + rng.IntN(L/4) // short rows
			}
		}
		onLadder := trial%4 < 2
		groups, err := PackGroups(lengths, unit, rows, L, onLadder)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := PackGroups(slices.Clone(lengths), unit, rows, L, onLadder)
		if !slices.Equal(groups, again) {
			t.Fatalf("lengths %v: cut %v, then %v", lengths, groups, again)
		}
		next := 0
		for _, g := range groups {
			if g[0] != next || g[1] <= g[0] {
				t.Fatalf("lengths %v: groups %v do not cover the units in order", lengths, groups)
			}
			next = g[1]
			n := g[1] - g[0]
			if onLadder && RowBucket(n) != n {
				t.Fatalf("group %v: %d units, not a row bucket", g, n)
			}
			seqs := append(slices.Clone(lengths[g[0]*unit:g[1]*unit]), make([]int, (RowBucket(n)-n)*unit)...)
			p, err := PackRows(seqs, L, L, rows)
			if err != nil {
				t.Fatalf("group %v of %v: %v", g, lengths, err)
			}
			if p.Rows > rows {
				t.Fatalf("group %v: %d packed rows, more than %d", g, p.Rows, rows)
			}
		}
		if next != len(lengths)/unit {
			t.Fatalf("lengths %v: groups %v end at unit %d", lengths, groups, next)
		}
		if unpacked := (len(lengths)/unit + rows/unit - 1) / (rows / unit); len(groups) < unpacked {
			fewer++
		}
	}
	if fewer < 50 {
		t.Errorf("only %d of 200 mini-batches ran in fewer micro-batches than unpacked", fewer)
	}
}

func TestPackRowsRefusesMoreRows(t *testing.T) {
	if _, err := PackRows([]int{8, 8, 8}, 8, 8, 2); err == nil || !strings.Contains(err.Error(), "need 3 rows of 8 tokens, more than 2") {
		t.Fatalf("error %v, want one about 3 rows needed", err)
	}
	p, err := PackRows([]int{3, 3, 3, 3, 3}, 8, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	if p.Rows != 3 { // 2+2+1 sequences: 3 rows, a bucket, under the cap
		t.Errorf("%d packed rows, want 3", p.Rows)
	}
}

func TestCutByTokensPicksTheRowsThatComputeLeast(t *testing.T) {
	cases := []struct {
		name          string
		lengths       []int
		rows, T, L    int
		wantRows, len int
		groups        int
	}{
		// Sequences of 10 in rows of 16 pack nothing: rows of 32 (half as many) hold 3 each.
		{"just over half of T", slices.Repeat([]int{10}, 8), 2, 16, 0, 1, 32, 3},
		// Short sequences pack into rows of T already; longer rows would cost more attention.
		{"short sequences", slices.Repeat([]int{4}, 16), 4, 16, 0, 4, 16, 1},
		{"a fixed row length", slices.Repeat([]int{10}, 8), 2, 16, 20, 2, 20, 2}, // two per row
		// Rows of 4T would exceed the budget's single row: never fewer rows than one.
		{"one row", []int{9, 9}, 1, 16, 0, 1, 16, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := CutByTokens(tc.lengths, 1, tc.rows, tc.T, tc.L, false)
			if err != nil {
				t.Fatal(err)
			}
			if c.Rows != tc.wantRows || c.Length != tc.len || len(c.Groups) != tc.groups {
				t.Fatalf("micro-batches of %d rows of %d, %d of them (%v); want %d rows of %d, %d of them",
					c.Rows, c.Length, len(c.Groups), c.Groups, tc.wantRows, tc.len, tc.groups)
			}
			if tc.L == 0 && c.Rows*c.Length != tc.rows*tc.T {
				t.Errorf("a micro-batch of %d slots, want the unpacked %d", c.Rows*c.Length, tc.rows*tc.T)
			}
		})
	}
}
