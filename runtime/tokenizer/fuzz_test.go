package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzBPERoundTrip checks that any text, valid UTF-8 or not, without
// special-token markup, decodes back to itself and yields in-range ids,
// through both the scanned Llama-3 split and (with ignore_merges) the
// whole-piece lookup.
// Run longer with: go test -run '^$' -fuzz FuzzBPERoundTrip -fuzztime 60s ./runtime/tokenizer
func FuzzBPERoundTrip(f *testing.F) {
	plain, err := Load(writeTiny(f, false, tinyConfig))
	if err != nil {
		f.Fatal(err)
	}
	whole, err := Load(writeTiny(f, true, tinyConfig))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "hello world", "a   b\n\n", "x  1", "'S'll", "\xff\xc3", "日本\u3000語 😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range []*BPE{plain, whole} {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("Encode(%q): id %d out of range", s, id)
				}
			}
			got := tok.Decode(ids)
			if containsAdded(s) {
				continue // special tokens are skipped on decode
			}
			if got != s {
				t.Fatalf("Decode(Encode(%q)) = %q (valid UTF-8: %v)", s, got, utf8.ValidString(s))
			}
		}
	})
}

func containsAdded(s string) bool {
	return strings.Contains(s, "<|bos|>") || strings.Contains(s, "<|eos|>")
}
