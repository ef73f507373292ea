package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
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

// FuzzLoad feeds arbitrary tokenizer.json files (a model directory is a
// download) to the loader: any input is an error or a tokenizer that
// encodes and decodes, never a panic, and bounded in time and memory (the
// id tables are sized by the file's own tokens).
// Run longer with: go test -run '^$' -fuzz FuzzLoad -fuzztime 60s ./runtime/tokenizer
func FuzzLoad(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join(writeTiny(f, false, tinyConfig), "tokenizer.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 2147483647}, "merges": []}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 16777215, "content": "x"}]}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": [["a", "b"]]}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		var tf tokenizerFile
		if json.Unmarshal(data, &tf) != nil {
			return
		}
		tok, err := build(&tf)
		if err != nil {
			return
		}
		if len(tok.tokens) > 2*len(data)+1<<17 {
			t.Fatalf("%d-byte file made %d-entry id tables", len(data), len(tok.tokens))
		}
		ids := tok.Encode("hello world 12")
		for _, id := range ids {
			if id < 0 || int(id) >= len(tok.tokens) {
				t.Fatalf("id %d out of the %d-entry vocabulary", id, len(tok.tokens))
			}
		}
		_ = tok.Decode(ids)
	})
}
