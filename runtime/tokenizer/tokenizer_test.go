package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestByte(t *testing.T) {
	var tok Tokenizer = NewByte()
	ids := tok.Encode("hé\n")
	if want := []int32{'h', 0xc3, 0xa9, '\n'}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("Encode = %v, want %v", ids, want)
	}
	withSpecials := append([]int32{tok.BOS(), tok.PAD()}, append(ids, tok.EOS(), 999, -1)...)
	if got := tok.Decode(withSpecials); got != "hé\n" {
		t.Errorf("Decode = %q", got)
	}
	if tok.VocabSize() != 259 || tok.PAD() != 256 || tok.BOS() != 257 || tok.EOS() != 258 || tok.Name() != "byte" {
		t.Errorf("sizes and specials: %d %d %d %d %q", tok.VocabSize(), tok.PAD(), tok.BOS(), tok.EOS(), tok.Name())
	}
	// Any byte string survives, valid UTF-8 or not.
	s := string([]byte{0xff, 0x00, 'a', 0xe2, 0x82})
	if got := tok.Decode(tok.Encode(s)); got != s {
		t.Errorf("round trip of invalid UTF-8: %q", got)
	}
}

// byteLevelAlphabet spells GPT-2's byte → character table from its
// definition: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves;
// the remaining 68, in increasing order, for U+0100, U+0101, ...
func byteLevelAlphabet(t testing.TB) [256]string {
	var a [256]string
	next := 0x100
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			a[b] = string(rune(b))
		} else {
			a[b] = string(rune(next))
			next++
		}
	}
	// Landmarks every GPT-2-style vocabulary shows.
	for b, want := range map[int]string{' ': "Ġ", '\n': "Ċ", '\t': "ĉ", 0: "Ā", 0x7f: "ġ", 0xad: "Ń"} {
		if a[b] != want {
			t.Fatalf("byte %#x → %q, want %q", b, a[b], want)
		}
	}
	return a
}

// tinyMerges are the merges of the test tokenizer, in rank order; the
// merged tokens get ids 256, 257, ... in the same order.
var tinyMerges = []string{
	"h e",    // 0 → 256 he
	"l l",    // 1 → 257 ll
	"he ll",  // 2 → 258 hell
	"hell o", // 3 → 259 hello
	"Ġ w",    // 4 → 260 Ġw
	"o r",    // 5 → 261 or
	"Ġw or",  // 6 → 262 Ġwor
	"l d",    // 7 → 263 ld
	"a a",    // 8 → 264 aa
	"Ġ Ġ",    // 9 → 265 ĠĠ
	"w o",    // 10 → 266 wo
}

// Ids of the test tokenizer beyond the merges.
const (
	idXYZ  = 267 // in the vocabulary but reachable only with ignore_merges
	idBOS  = 268
	idEOS  = 269
	idTool = 270 // a non-special added token
)

// writeTiny writes a tokenizer.json (Llama-3 layout: Split with the Llama-3
// pattern, then ByteLevel without regex) and a tokenizer_config.json.
func writeTiny(t testing.TB, ignoreMerges bool, config string) string {
	t.Helper()
	alpha := byteLevelAlphabet(t)
	vocab := map[string]int{}
	for b, s := range alpha {
		vocab[s] = b // ids 0..255 in byte order
	}
	var mergesJSON []any
	for i, m := range tinyMerges {
		a, b, _ := strings.Cut(m, " ")
		vocab[a+b] = 256 + i
		if i%2 == 0 { // both spellings of a merge occur in the wild
			mergesJSON = append(mergesJSON, []string{a, b})
		} else {
			mergesJSON = append(mergesJSON, a+" "+b)
		}
	}
	vocab["xyz"] = idXYZ
	file := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": idBOS, "content": "<|bos|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
			{"id": idEOS, "content": "<|eos|>", "special": true},
			{"id": idTool, "content": "<tool>", "special": false},
		},
		"normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": llama3Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false,
			"ignore_merges": ignoreMerges, "vocab": vocab, "merges": mergesJSON,
		},
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const tinyConfig = `{"bos_token": "<|bos|>", "eos_token": {"content": "<|eos|>", "__type": "AddedToken"}, "pad_token": null}`

func TestBPEEncode(t *testing.T) {
	tok, err := Load(writeTiny(t, false, tinyConfig))
	if err != nil {
		t.Fatal(err)
	}
	// Each expectation follows the merges by hand, lowest rank first.
	cases := []struct {
		in   string
		want []int32
	}{
		// hello: he(0) → ll(1) → hell(2) → hello(3).
		// " world" → Ġ w o r l d: Ġw(4), or(5), Ġwor(6), ld(7).
		{"hello world", []int32{259, 262, 263}},
		// w o r d: "o r" (rank 5) wins over the earlier "w o" (rank 10),
		// after which w + or has no merge.
		{"word", []int32{'w', 261, 'd'}},
		// Equal ranks merge left to right.
		{"aaa", []int32{264, 'a'}},
		{"aaaa", []int32{264, 264}},
		// The pre-tokenizer keeps a lone space apart from the word, so
		// "Ġ Ġ" applies only to the first two of three spaces.
		{"a   b", []int32{'a', 265, ' ', 'b'}},
		{"a  b", []int32{'a', ' ', ' ', 'b'}},
		// é is bytes C3 A9, the characters Ã and ©.
		{"héllo", []int32{'h', 0xc3, 0xa9, 257, 'o'}},
		{"xyz", []int32{'x', 'y', 'z'}},
		{"<|bos|>hello<|eos|>", []int32{idBOS, 259, idEOS}},
		{"x<tool>y", []int32{'x', idTool, 'y'}},
		{"a\n\nb", []int32{'a', '\n', '\n', 'b'}},
		{"", nil},
	}
	for _, c := range cases {
		if got := tok.Encode(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if tok.BOS() != idBOS || tok.EOS() != idEOS || tok.PAD() != idEOS {
		t.Errorf("BOS %d EOS %d PAD %d, want %d %d %d (PAD falls back to EOS)", tok.BOS(), tok.EOS(), tok.PAD(), idBOS, idEOS, idEOS)
	}
	if tok.VocabSize() != idTool+1 {
		t.Errorf("VocabSize = %d, want %d", tok.VocabSize(), idTool+1)
	}
	if tok.Name() != "bpe:tiny" {
		t.Errorf("Name = %q", tok.Name())
	}
}

func TestBPEIgnoreMerges(t *testing.T) {
	tok, err := Load(writeTiny(t, true, ""))
	if err != nil {
		t.Fatal(err)
	}
	// A piece that is itself a vocabulary token is taken whole.
	if got := tok.Encode("xyz hello"); !reflect.DeepEqual(got, []int32{idXYZ, ' ', 259}) {
		t.Errorf("Encode = %v", got)
	}
	if tok.BOS() != -1 || tok.EOS() != -1 || tok.PAD() != -1 {
		t.Errorf("without tokenizer_config.json: BOS %d EOS %d PAD %d, want -1", tok.BOS(), tok.EOS(), tok.PAD())
	}
}

func TestBPEDecode(t *testing.T) {
	tok, err := Load(writeTiny(t, false, tinyConfig))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ids  []int32
		want string
	}{
		{[]int32{idBOS, 259, 262, 263, idEOS}, "hello world"},
		{[]int32{'x', idTool, 'y'}, "x<tool>y"},
		{[]int32{265, -5, 100000, 'a'}, "  a"},
		// A partial UTF-8 sequence is kept as is.
		{[]int32{'h', 0xc3}, "h\xc3"},
	}
	for _, c := range cases {
		if got := tok.Decode(c.ids); got != c.want {
			t.Errorf("Decode(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
}

// randomText draws strings mixing ASCII letters, digits, punctuation,
// apostrophes, all kinds of whitespace, Latin-1, CJK and emoji.
func randomText(rng *rand.Rand) string {
	pools := []string{
		"abcdefghijklmnopqrstuvwxyzABCXYZ", "0123456789", "'.,!?;:-_()[]{}<>|/\\\"#$%&*+=@^`~",
		" ", "  ", "\n", "\r\n", "\t", "\u00a0\u3000\u2028\u0085\v\f",
		"éèüßñçÅØſ", "日本語中文한국어", "😀🚀👍🏽", "\u0301\u200d", "'s'T're'LL'd", "٣١٢²½Ⅻ",
	}
	var b strings.Builder
	for n := rng.IntN(40); n > 0; n-- {
		p := []rune(pools[rng.IntN(len(pools))])
		b.WriteRune(p[rng.IntN(len(p))])
	}
	return b.String()
}

func TestBPERoundTrip(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		tok, err := Load(writeTiny(t, ignore, tinyConfig))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(11, uint64(len("seed"))))
		for range 3000 {
			s := randomText(rng)
			if !utf8.ValidString(s) {
				t.Fatalf("generator made invalid UTF-8 %q", s)
			}
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("Encode(%q) produced id %d", s, id)
				}
			}
			if got := tok.Decode(ids); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
		}
	}
}

func TestBPEDeterministicAndConcurrent(t *testing.T) {
	tok, err := Load(writeTiny(t, false, tinyConfig))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("hello world, word aaa   <tool> héllo\n", 50)
	want := tok.Encode(text)
	done := make(chan []int32)
	for range 4 {
		go func() { done <- tok.Encode(text) }()
	}
	for range 4 {
		if got := <-done; !reflect.DeepEqual(got, want) {
			t.Fatal("concurrent Encode differs")
		}
	}
}

// naiveBPE is the textbook algorithm: repeatedly merge the leftmost of the
// lowest-ranked adjacent pairs, rescanning the whole piece each time.
func naiveBPE(t *BPE, ids []int32) []int32 {
	ids = append([]int32(nil), ids...)
	for {
		best, bestRank := -1, int32(1<<30)
		var bestID int32
		for i := 0; i+1 < len(ids); i++ {
			if m, ok := t.merges[[2]int32{ids[i], ids[i+1]}]; ok && m.rank < bestRank {
				best, bestRank, bestID = i, m.rank, m.id
			}
		}
		if best < 0 {
			return ids
		}
		ids[best] = bestID
		ids = append(ids[:best+1], ids[best+2:]...)
	}
}

// TestBPEAgainstNaive compares the heap-based merge loop with naiveBPE on a
// random merge table dense enough that merges compete and overlap.
func TestBPEAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	alpha := byteLevelAlphabet(t)
	vocab := map[string]int32{}
	for b, s := range alpha {
		vocab[s] = int32(b)
	}
	toks := []string{"a", "b", "c", "Ġ"}
	var merges []json.RawMessage
	for len(merges) < 80 {
		x, y := toks[rng.IntN(len(toks))], toks[rng.IntN(len(toks))]
		if _, dup := vocab[x+y]; dup || utf8.RuneCountInString(x+y) > 6 {
			continue
		}
		vocab[x+y] = int32(len(vocab))
		toks = append(toks, x+y)
		js, _ := json.Marshal(x + " " + y)
		merges = append(merges, js)
	}
	pre, _ := json.Marshal(map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})
	tok, err := build(&tokenizerFile{PreTokenizer: pre, Model: modelJSON{Type: "BPE", Vocab: vocab, Merges: merges}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3000 {
		var b strings.Builder
		for n := rng.IntN(30); n > 0; n-- {
			b.WriteByte("abc "[rng.IntN(4)])
		}
		var pieces []string
		tok.preTokenize(b.String(), true, func(p string) { pieces = append(pieces, p) })
		for _, piece := range pieces {
			var start []int32
			for i := 0; i < len(piece); i++ {
				start = append(start, tok.byteID[piece[i]])
			}
			if got, want := tok.bpe(piece, nil, &scratch{}), naiveBPE(tok, start); !reflect.DeepEqual(got, want) {
				t.Fatalf("bpe(%q) = %v, naive %v", piece, got, want)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	good := func(t *testing.T) map[string]any {
		dir := writeTiny(t, false, "")
		raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	cases := []struct {
		name   string
		edit   func(m map[string]any)
		config string
		want   string
	}{
		{"wordpiece", func(m map[string]any) { model(m)["type"] = "WordPiece" }, "", `model type "WordPiece" is not supported`},
		{"missing byte", func(m map[string]any) { delete(model(m)["vocab"].(map[string]any), "Ġ") }, "", "lacks the byte-level token"},
		{"unknown merge token", func(m map[string]any) { model(m)["merges"] = []any{"q zz"} }, "", "not in the vocab"},
		{"bad merge", func(m map[string]any) { model(m)["merges"] = []any{"abc"} }, "", "not two tokens"},
		{"duplicate id", func(m map[string]any) { model(m)["vocab"].(map[string]any)["dup"] = 5 }, "", "id 5 is given to both"},
		{"huge vocab id", func(m map[string]any) { model(m)["vocab"].(map[string]any)["big"] = 2147483647 }, "", `token "big" has id 2147483647, outside 0…`},
		{"huge added id", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 2147483647, "content": "<big>", "special": true}}
		}, "", `added token "<big>" has id 2147483647`},
		{"dropout", func(m map[string]any) { model(m)["dropout"] = 0.1 }, "", "dropout"},
		{"metaspace replacement", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, "", `replacement "" is not one character`},
		{"unigram", func(m map[string]any) { model(m)["type"] = "Unigram" }, "", `model type "Unigram" is not supported`},
		{"precompiled", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Precompiled"} }, "", `type "Precompiled" is not supported`},
		{"post processor", func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} }, "", `post_processor: type "BertProcessing" is not supported`},
		{"byte fallback with byte level", func(m map[string]any) { model(m)["byte_fallback"] = true }, "", "byte_fallback with a ByteLevel pre-tokenizer"},
		{"unknown unk", func(m map[string]any) { model(m)["unk_token"] = "<nope>" }, "", `unk_token "<nope>" is not in the vocab`},
		{"no byte level", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\s+`}, "behavior": "Isolated"}
		}, "", "ByteLevel needs a ByteLevel pre-tokenizer"},
		{"look-behind", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?<=a)b`}, "behavior": "Isolated"},
				map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}, "", "look-around"},
		{"two byte levels", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "ByteLevel", "use_regex": false},
				map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}, "", "exactly one ByteLevel step"},
		{"unknown behavior", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Sideways"},
				map[string]any{"type": "ByteLevel", "use_regex": false}}}
		}, "", `behavior "Sideways"`},
		{"regex replace normalizer", func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": " "}
		}, "", `Replace pattern map[Regex: +] is not supported`},
		{"eos list", func(m map[string]any) {}, `{"eos_token_id": "x"}`, "neither an id nor a list"},
		{"wordpiece decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }, "", "decoder"},
		{"unknown bos", func(m map[string]any) {}, `{"bos_token": "<s>"}`, `bos_token "<s>" is not a token`},
		{"malformed config", func(m map[string]any) {}, `{"bos_token": 3}`, "neither a string nor an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := good(t)
			c.edit(m)
			dir := t.TempDir()
			js, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644); err != nil {
				t.Fatal(err)
			}
			if c.config != "" {
				name := "tokenizer_config.json"
				if strings.Contains(c.config, "eos_token_id") {
					name = "generation_config.json"
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(c.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load error = %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load of an empty dir: %v", err)
	}
}

func TestNormalizerAndPrefixSpace(t *testing.T) {
	dir := writeTiny(t, false, "")
	raw, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}}}
	m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}
	js, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	// "e" + combining acute composes to é (C3 A9); the prefix space makes
	// "world" into " world", and is added again after the added token.
	if got, want := tok.Encode("he\u0301<tool>world"), []int32{' ', 'h', 0xc3, 0xa9, idTool, 262, 263}; !reflect.DeepEqual(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
}

func BenchmarkBPEEncode(b *testing.B) {
	tok, err := Load(writeTiny(b, false, tinyConfig))
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("hello world, the word aaa   <tool> héllo 12345\n", 200)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}
