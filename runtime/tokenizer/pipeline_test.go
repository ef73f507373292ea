package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Ids of the SentencePiece-style test tokenizer.
const (
	spUnk      = 0
	spBOS      = 1
	spEOS      = 2
	spByte0    = 3 // <0x00>; byte b is spByte0+b
	spMeta     = 259
	spA        = 260
	spB        = 261
	spC        = 262
	spE        = 263 // é
	spMetaA    = 264 // ▁a
	spBC       = 265
	spMetaABC  = 266
	spMetaMeta = 267
	spTool     = 268 // a non-special added token, normalized
	spRaw      = 269 // a non-special added token, not normalized
)

// writeSP writes a Llama-2-style tokenizer.json (normalizer Prepend + Replace,
// byte fallback, decoder Replace/ByteFallback/Fuse/Strip, a BOS template)
// after edit has changed it, and returns its directory.
func writeSP(t testing.TB, edit func(m map[string]any)) string {
	t.Helper()
	vocab := map[string]int{"<unk>": spUnk, "<s>": spBOS, "</s>": spEOS}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = spByte0 + b
	}
	for tok, id := range map[string]int{"▁": spMeta, "a": spA, "b": spB, "c": spC, "é": spE,
		"▁a": spMetaA, "bc": spBC, "▁abc": spMetaABC, "▁▁": spMetaMeta} {
		vocab[tok] = id
	}
	m := map[string]any{
		"added_tokens": []map[string]any{
			{"id": spUnk, "content": "<unk>", "special": true, "normalized": false},
			{"id": spBOS, "content": "<s>", "special": true, "normalized": false},
			{"id": spEOS, "content": "</s>", "special": true, "normalized": false},
			{"id": spTool, "content": "<tool>", "special": false},
			{"id": spRaw, "content": "<raw>", "special": false, "normalized": false},
		},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{spBOS}}}},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
			"vocab": vocab, "merges": []any{"▁ a", []string{"b", "c"}, "▁a bc", "▁ ▁"}},
	}
	if edit != nil {
		edit(m)
	}
	dir := t.TempDir()
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"bos_token": "<s>", "eos_token": {"content": "</s>", "__type": "AddedToken"}, "unk_token": "<unk>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func byteTok(b byte) int32 { return spByte0 + int32(b) }

func TestSentencePieceEncode(t *testing.T) {
	tok, err := Load(writeSP(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in   string
		want []int32
	}{
		// ▁abc: ▁a (rank 0), bc (1), then ▁a+bc (2).
		{"abc", []int32{spMetaABC}},
		{"a b", []int32{spMetaA, spMeta, spB}},
		// "▁▁a": ▁a (rank 0) merges before ▁▁ (rank 3) could.
		{" a", []int32{spMeta, spMetaA}},
		{"  ", []int32{spMetaMeta, spMeta}},
		{"é", []int32{spMeta, spE}},
		// ü is not in the vocabulary: its two UTF-8 bytes fall back.
		{"ü", []int32{spMeta, byteTok(0xc3), byteTok(0xbc)}},
		// An invalid byte falls back too.
		{"a\xff", []int32{spMetaA, byteTok(0xff)}},
		// Special tokens split the text before normalization: each stretch
		// gets its own prepended ▁.
		{"<s>a</s>b", []int32{spBOS, spMetaA, spEOS, spMeta, spB}},
		// A normalized added token is found in the normalized text, so the
		// text around it is one stretch (one ▁ prepended); a raw one splits
		// the text first.
		{"a <tool> b", []int32{spMetaA, spMeta, spTool, spMeta, spB}},
		{"a <raw> b", []int32{spMetaA, spMeta, spRaw, spMetaMeta, spB}},
		{"", nil},
	}
	for _, c := range cases {
		if got := tok.Encode(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got, want := tok.EncodeSpecial("abc"), []int32{spBOS, spMetaABC}; !reflect.DeepEqual(got, want) {
		t.Errorf("EncodeSpecial = %v, want %v", got, want)
	}
	if got, want := tok.EncodeSpecial(""), []int32{spBOS}; !reflect.DeepEqual(got, want) {
		t.Errorf("EncodeSpecial(\"\") = %v, want %v", got, want)
	}

	decodes := []struct {
		ids        []int32
		want, keep string
	}{
		{[]int32{spBOS, spMetaA, spMeta, spB, spEOS}, "a b", "<s> a b</s>"},
		{[]int32{spMeta, byteTok(0xc3), byteTok(0xbc), spMetaA}, "ü a", "ü a"},
		// A partial character stays as its bytes.
		{[]int32{spMetaA, byteTok(0xc3)}, "a\xc3", "a\xc3"},
		{[]int32{spUnk, 9999, -1}, "", "<unk>"},
	}
	for _, d := range decodes {
		if got := tok.Decode(d.ids); got != d.want {
			t.Errorf("Decode(%v) = %q, want %q", d.ids, got, d.want)
		}
		if got := tok.DecodeSpecial(d.ids); got != d.keep {
			t.Errorf("DecodeSpecial(%v) = %q, want %q", d.ids, got, d.keep)
		}
	}
	if tok.BOS() != spBOS || tok.EOS() != spEOS || !slices.Equal(tok.StopTokens(), []int32{spEOS}) {
		t.Errorf("BOS %d EOS %d stops %v", tok.BOS(), tok.EOS(), tok.StopTokens())
	}
}

func TestUnknownTokens(t *testing.T) {
	noFallback := func(fuse bool) func(m map[string]any) {
		return func(m map[string]any) {
			model := m["model"].(map[string]any)
			model["byte_fallback"], model["fuse_unk"] = false, fuse
		}
	}
	for _, c := range []struct {
		fuse bool
		want []int32
	}{{true, []int32{spMeta, spUnk, spMetaA}}, {false, []int32{spMeta, spUnk, spUnk, spMetaA}}} {
		tok, err := Load(writeSP(t, noFallback(c.fuse)))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("üü a"); !reflect.DeepEqual(got, c.want) {
			t.Errorf("fuse_unk %v: Encode = %v, want %v", c.fuse, got, c.want)
		}
	}
}

func TestMetaspace(t *testing.T) {
	metaspace := func(scheme string, split bool) func(m map[string]any) {
		return func(m map[string]any) {
			m["normalizer"] = nil
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
			m["decoder"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme}
		}
	}
	cases := []struct {
		scheme string
		split  bool
		in     string
		want   []int32
	}{
		{"always", true, "a b", []int32{spMetaA, spMeta, spB}},
		{"always", true, "<s>a b", []int32{spBOS, spMetaA, spMeta, spB}},
		// "first" prepends only at the start of the input.
		{"first", true, "a b", []int32{spMetaA, spMeta, spB}},
		{"first", true, "<s>a b", []int32{spBOS, spA, spMeta, spB}},
		{"never", true, "a b", []int32{spA, spMeta, spB}},
		// Without split, "▁a▁b" is one piece: ▁a, then ▁ b.
		{"always", false, "a bc", []int32{spMetaA, spMeta, spBC}},
		// With split, "▁a", "▁bc" are merged apart, so ▁abc cannot form.
		{"always", true, "abc", []int32{spMetaABC}},
	}
	for _, c := range cases {
		tok, err := Load(writeSP(t, metaspace(c.scheme, c.split)))
		if err != nil {
			t.Fatal(err)
		}
		got := tok.Encode(c.in)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s split=%v: Encode(%q) = %v, want %v", c.scheme, c.split, c.in, got, c.want)
		}
		if c.scheme != "never" {
			if text := tok.Decode(got); text != "a b" && text != "a bc" && text != "abc" {
				t.Errorf("%s: Decode(%v) = %q", c.scheme, got, text)
			}
		}
	}
	// add_prefix_space, the older spelling of the scheme, defaults to true.
	tok, err := Load(writeSP(t, func(m map[string]any) {
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("a"); !reflect.DeepEqual(got, []int32{spMetaA}) {
		t.Errorf("legacy Metaspace: %v", got)
	}
}

func TestSplitBehaviors(t *testing.T) {
	re, err := compileSplit(quoteOniguruma("-"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		"Isolated":           {"a", "-", "b", "-", "-", "c", "-"},
		"Removed":            {"a", "b", "c"},
		"MergedWithPrevious": {"a-", "b-", "-", "c-"},
		"MergedWithNext":     {"a", "-b", "-", "-c", "-"},
		"Contiguous":         {"a", "-", "b", "--", "c", "-"},
	} {
		var got []string
		re.pieces("a-b--c-", behaviors[name], false, func(p string) { got = append(got, p) })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	// Leading matches.
	var got []string
	re.pieces("-a", mergedWithPrevious, false, func(p string) { got = append(got, p) })
	if !reflect.DeepEqual(got, []string{"-", "a"}) {
		t.Errorf("MergedWithPrevious of -a: %q", got)
	}
	// Inverted, the pattern's matches are kept and the gaps are delimiters.
	for name, want := range map[string][]string{
		"Removed":        {"-", "-", "-", "-"},
		"Isolated":       {"a", "-", "b", "-", "-", "c", "-"},
		"MergedWithNext": {"a-", "b-", "-", "c-"},
	} {
		got = nil
		re.pieces("a-b--c-", behaviors[name], true, func(p string) { got = append(got, p) })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("inverted %s: %q, want %q", name, got, want)
		}
	}
}

func TestStopTokens(t *testing.T) {
	dir := writeSP(t, nil)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("generation_config.json", fmt.Sprintf(`{"bos_token_id": 1, "eos_token_id": [%d, %d]}`, spTool, spEOS))
	write("config.json", fmt.Sprintf(`{"eos_token_id": %d}`, spRaw))
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.StopTokens(), []int32{spEOS, spTool, spRaw}; !slices.Equal(got, want) {
		t.Errorf("StopTokens = %v, want %v", got, want)
	}
	write("config.json", `{"eos_token_id": 99999}`)
	if _, err := Load(dir); err == nil {
		t.Error("an eos_token_id outside the vocabulary was accepted")
	}
	if got := NewByte().StopTokens(); !slices.Equal(got, []int32{ByteEOS}) {
		t.Errorf("Byte StopTokens = %v", got)
	}
}

// FuzzSentencePieceRoundTrip checks that any text, valid UTF-8 or not, without
// added-token markup, decodes back to itself: byte fallback covers every byte
// and the Strip decoder removes exactly the prepended space.
func FuzzSentencePieceRoundTrip(f *testing.F) {
	tok, err := Load(writeSP(f, nil))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "abc", " a  b ", "ü\xff", "日本 😀", "\u2581x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, a := range []string{"<unk>", "<s>", "</s>", "<tool>", "<raw>"} {
			if strings.Contains(s, a) {
				return
			}
		}
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("Encode(%q): id %d out of range", s, id)
			}
		}
		// ▁ in the input decodes as a space, as in SentencePiece.
		want := strings.ReplaceAll(s, "\u2581", " ")
		if got := tok.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q (valid UTF-8: %v)", s, got, utf8.ValidString(s))
		}
	})
}

// TestParseMerge checks the fast path of merge parsing against encoding/json.
func TestParseMerge(t *testing.T) {
	for _, c := range []struct{ raw, a, b string }{
		{`"a b"`, "a", "b"},
		{`"Ġ Ġt"`, "Ġ", "Ġt"},
		{`["a","b"]`, "a", "b"},
		{`[ "▁ x" , "y" ]`, "▁ x", "y"},
		{`["\"q","\u0041"]`, `"q`, "A"},
		{`"\u0041 b"`, "A", "b"},
		{`["a", "b", "c"]`, "", ""},
		{`"a  b"`, "", ""},
		{`"ab"`, "", ""},
		{`"a b`, "", ""},
		{`7`, "", ""},
	} {
		a, b, err := parseMerge(json.RawMessage(c.raw))
		if c.a == "" {
			if err == nil {
				t.Errorf("parseMerge(%s) = %q %q, want an error", c.raw, a, b)
			}
			continue
		}
		if err != nil || a != c.a || b != c.b {
			t.Errorf("parseMerge(%s) = %q %q %v, want %q %q", c.raw, a, b, err, c.a, c.b)
		}
	}
}
