package runtime

import "testing"

// TestGCPercentFor: a small heap keeps the default pacing; a large one may grow by
// max(512 MiB, live/8) of garbage before the next collection.
func TestGCPercentFor(t *testing.T) {
	const gib = 1 << 30
	for _, tt := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{100 << 20, 100},
		{512 << 20, 100},
		{1 * gib, 50},
		{2 * gib, 25},
		{4 * gib, 12},
		{12 * gib, 12},
		{64 * gib, 12},
	} {
		if got := gcPercentFor(tt.live); got != tt.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", tt.live>>20, got, tt.want)
		}
		if tt.live > 0 {
			// The allowance the percentage gives, within rounding of one percent.
			allow := float64(tt.live) * float64(gcPercentFor(tt.live)) / 100
			if want := max(float64(garbageFloor), float64(tt.live)/garbageShare); tt.live >= garbageFloor && (allow > want || allow < want-float64(tt.live)/100) {
				t.Errorf("live %d MiB: allowance %.0f MiB, want %.0f", tt.live>>20, allow/(1<<20), want/(1<<20))
			}
		}
	}
}
