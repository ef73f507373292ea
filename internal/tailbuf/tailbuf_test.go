package tailbuf

import (
	"strings"
	"testing"
)

func TestBufferKeepsTheEnd(t *testing.T) {
	for _, tc := range []struct {
		max    int
		writes []string
		want   string
	}{
		{8, nil, ""},
		{8, []string{"abc"}, "abc"},
		{8, []string{"abc", "defgh"}, "abcdefgh"},
		{8, []string{"abc", "defghij"}, "cdefghij"},
		{4, []string{strings.Repeat("x", 100) + "tail"}, "tail"},
		{4, []string{"ab", "cd", "ef"}, "cdef"},
	} {
		b := New(tc.max)
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := b.String(); got != tc.want {
			t.Errorf("max %d, writes %q: %q, want %q", tc.max, tc.writes, got, tc.want)
		}
	}
}
