package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"stx.dev/stx/internal/plainfile"
)

// tokenizerFile is the part of tokenizer.json that encoding and decoding use.
// truncation and padding are left out: encoding never truncates or pads.
type tokenizerFile struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         modelJSON        `json:"model"`
}

type addedTokenJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Special    bool   `json:"special"`
	// Normalized tokens are matched in the normalized text; Hugging Face
	// defaults it to true for non-special tokens.
	Normalized *bool `json:"normalized"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]int32  `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
	Dropout                 *float64          `json:"dropout"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	UnkToken                *string           `json:"unk_token"`
	FuseUnk                 bool              `json:"fuse_unk"`
}

// Size bounds of the files a model's tokenizer and chat template are read
// from. They come with a model download: a file past its bound, a named
// pipe or a device in its place is an error, not a read that blocks or
// exhausts memory (internal/plainfile). The largest published
// tokenizer.json files are tens of megabytes, configurations far less.
const (
	MaxTokenizerBytes = 512 << 20 // tokenizer.json
	MaxConfigBytes    = 64 << 20  // tokenizer_config.json, generation_config.json, config.json
)

// typed reads the "type" of a tokenizer.json component.
type typed struct {
	Type string `json:"type"`
}

// Load reads dir/tokenizer.json (and, if present, dir/tokenizer_config.json
// for bos_token, eos_token and pad_token, and dir/generation_config.json and
// dir/config.json for the eos_token_id of the stop set) and returns its
// tokenizer.
//
// Supported: model BPE, either over the GPT-2 byte-level alphabet (with a
// ByteLevel pre-tokenizer; all 256 byte characters must be in the vocab) or
// over characters, SentencePiece style (Llama 2, Mistral, Gemma: no ByteLevel
// step; byte_fallback to <0xNN> tokens, unk_token, fuse_unk); merges as
// "a b" strings or [a, b] pairs; ignore_merges. added_tokens with special,
// normalized, single_word, lstrip and rstrip. Normalizers NFC, NFD, NFKC,
// NFKD, Lowercase, Prepend, Replace (String pattern), Strip and Sequence of
// them. Pre-tokenizers Split (Regex or String pattern; behaviour Isolated,
// Removed, MergedWithPrevious, MergedWithNext or Contiguous; invert),
// ByteLevel (add_prefix_space, use_regex; once and last), Metaspace
// (replacement, prepend_scheme or add_prefix_space, split) and Sequence of
// them. Decoders ByteLevel, Metaspace, Replace (String pattern),
// ByteFallback, Fuse, Strip and Sequence of them. Post-processors
// TemplateProcessing (its "single" template), ByteLevel and Sequence of
// them, applied by EncodeSpecial. Split patterns are translated to Go's
// regexp (see regex.go); the GPT-2, Llama-3 and Qwen2 patterns use exact
// hand-written scanners (scan.go). Anything else (WordPiece, Unigram, BPE
// dropout, Precompiled normalizers, look-behind in patterns, ...) is an error
// naming it.
func Load(dir string) (*BPE, error) {
	path := filepath.Join(dir, "tokenizer.json")
	raw, err := plainfile.ReadFile(path, MaxTokenizerBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var f tokenizerFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	t, err := build(&f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	t.name = "bpe:" + filepath.Base(filepath.Clean(dir))
	if err := t.loadSpecials(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := t.loadStops(dir); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// build constructs the tokenizer from a parsed tokenizer.json.
func build(f *tokenizerFile) (*BPE, error) {
	m := &f.Model
	switch {
	case m.Type != "BPE" && !(m.Type == "" && m.Vocab != nil):
		return nil, fmt.Errorf("model type %q is not supported (only BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("BPE dropout %g is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, fmt.Errorf("continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("end_of_word_suffix is not supported")
	}
	t := &BPE{vocab: m.Vocab, ignoreMerges: m.IgnoreMerges, bos: -1, eos: -1, pad: -1, unk: -1, fuseUnk: m.FuseUnk}

	// id → text tables over the vocabulary and the added tokens.
	// Ids index tables sized by the largest: bounded, so that one huge id
	// (2147483647) is an error, not an int32 overflow or a multi-gigabyte
	// allocation. Real vocabularies are dense and far smaller.
	// The tables may have gaps (reserved ids), but not many: their size is
	// bounded by the file's own token count, so a tiny file cannot make
	// them huge either.
	limit := int32(min(maxTokenID, 2*(len(m.Vocab)+len(f.AddedTokens))+1<<16))
	size := int32(0)
	for tok, id := range m.Vocab {
		if id < 0 || id >= limit {
			return nil, fmt.Errorf("vocab: token %q has id %d, outside 0…%d (ids are dense: the file has %d tokens)", tok, id, limit-1, len(m.Vocab)+len(f.AddedTokens))
		}
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID == nil || *a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("added token %q: missing or negative id, or empty content", a.Content)
		}
		if *a.ID >= limit {
			return nil, fmt.Errorf("added token %q has id %d, outside 0…%d (ids are dense: the file has %d tokens)", a.Content, *a.ID, limit-1, len(m.Vocab)+len(f.AddedTokens))
		}
		size = max(size, *a.ID+1)
	}
	t.tokens = make([]string, size)
	t.special = make([]bool, size)
	t.added = make([]bool, size)
	have := make([]bool, size)
	for tok, id := range m.Vocab {
		if have[id] {
			return nil, fmt.Errorf("vocab: id %d is given to both %q and %q", id, t.tokens[id], tok)
		}
		have[id] = true
		t.tokens[id] = tok
	}
	for _, a := range f.AddedTokens {
		id := *a.ID
		if t.added[id] && t.tokens[id] != a.Content {
			return nil, fmt.Errorf("added tokens: id %d is given to both %q and %q", id, t.tokens[id], a.Content)
		}
		t.tokens[id], t.added[id], t.special[id] = a.Content, true, a.Special
		at := &addedToken{id: id, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		first := a.Content[0]
		if normalized := !a.Special; (a.Normalized == nil && normalized) || (a.Normalized != nil && *a.Normalized) {
			t.normAdded.byFirst[first] = append(t.normAdded.byFirst[first], at)
		} else {
			t.rawAdded.byFirst[first] = append(t.rawAdded.byFirst[first], at)
		}
	}
	t.rawAdded.sort()
	t.normAdded.sort()

	var err error
	if t.normalizers, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if t.steps, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if t.post, err = parsePostProcessor(f.PostProcessor, t); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	// A ByteLevel pre-tokenizer step makes the model byte-level; without one
	// the model works on characters (SentencePiece style).
	nByteLevel := 0
	for _, st := range t.steps {
		if st.byteLevel {
			nByteLevel++
		}
	}
	t.byteLevel = nByteLevel > 0
	if t.byteLevel && (nByteLevel != 1 || !t.steps[len(t.steps)-1].byteLevel) {
		return nil, fmt.Errorf("pre_tokenizer: exactly one ByteLevel step, last, is supported")
	}
	if t.decoders, err = parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	var d typed
	_ = json.Unmarshal(f.Decoder, &d)
	t.plainDecoder = isNull(f.Decoder) || d.Type == "ByteLevel"
	if !t.byteLevel && d.Type == "ByteLevel" {
		return nil, fmt.Errorf("decoder: ByteLevel needs a ByteLevel pre-tokenizer step")
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocab", *m.UnkToken)
		}
		t.unk = id
	}

	if t.byteLevel {
		if m.ByteFallback {
			return nil, fmt.Errorf("byte_fallback with a ByteLevel pre-tokenizer is not supported (byte-level BPE needs none)")
		}
		// The byte-level alphabet must be complete, so that any text encodes.
		t.byteToRune = gpt2ByteToRune()
		t.runeToByte = make(map[rune]byte, 256)
		for b, r := range t.byteToRune {
			t.runeToByte[r] = byte(b)
			id, ok := m.Vocab[string(r)]
			if !ok {
				return nil, fmt.Errorf("vocab lacks the byte-level token %q for byte %#02x", string(r), b)
			}
			t.byteID[b] = id
		}
	} else {
		t.charID = make(map[rune]int32)
		for tok, id := range m.Vocab {
			if r, w := utf8.DecodeRuneInString(tok); w == len(tok) && r != utf8.RuneError {
				t.charID[r] = id
			}
		}
		t.byteFallback = m.ByteFallback
		for b := range 256 {
			t.fallbackID[b] = -1
			if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
				t.fallbackID[b] = id
			}
		}
	}

	t.merges = make(map[[2]int32]merge, len(m.Merges))
	for rank, rm := range m.Merges {
		a, b, err := parseMerge(rm)
		if err != nil {
			return nil, fmt.Errorf("merge %d: %w", rank, err)
		}
		ia, oka := m.Vocab[a]
		ib, okb := m.Vocab[b]
		id, okm := m.Vocab[a+b]
		if !oka || !okb || !okm {
			return nil, fmt.Errorf("merge %d (%q %q): a token or the merged token %q is not in the vocab", rank, a, b, a+b)
		}
		// A repeated pair keeps its last rank, as Hugging Face's map does.
		t.merges[[2]int32{ia, ib}] = merge{rank: int32(rank), id: id}
	}
	return t, nil
}

// parseMerge reads a merge written as "a b" or as ["a", "b"].
func parseMerge(raw json.RawMessage) (string, string, error) {
	// Fast path (large vocabularies have 500k merges): strings without escapes.
	if a, b, ok := plainMerge(raw); ok {
		return a, b, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two tokens separated by one space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("%s is neither \"a b\" nor [\"a\", \"b\"]", raw)
	}
	return pair[0], pair[1], nil
}

// plainMerge reads "a b" or ["a","b"] (spaces allowed around the comma)
// when no string has an escape; ok is false otherwise.
func plainMerge(raw []byte) (a, b string, ok bool) {
	if bytes.IndexByte(raw, '\\') >= 0 || len(raw) < 2 {
		return "", "", false
	}
	if raw[0] == '"' {
		body := raw[1 : len(raw)-1]
		i := bytes.IndexByte(body, ' ')
		if raw[len(raw)-1] != '"' || bytes.IndexByte(body, '"') >= 0 || i <= 0 || i == len(body)-1 || bytes.IndexByte(body[i+1:], ' ') >= 0 {
			return "", "", false
		}
		return string(body[:i]), string(body[i+1:]), true
	}
	if raw[0] != '[' || raw[len(raw)-1] != ']' {
		return "", "", false
	}
	parts := bytes.Split(raw[1:len(raw)-1], []byte{'"'})
	// [ "a" , "b" ] splits into: space, a, comma, b, space.
	if len(parts) != 5 || len(bytes.TrimSpace(parts[0])) != 0 || len(bytes.TrimSpace(parts[4])) != 0 ||
		!bytes.Equal(bytes.TrimSpace(parts[2]), []byte{','}) {
		return "", "", false
	}
	return string(parts[1]), string(parts[3]), true
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// parseNormalizer returns the normalization functions to apply in order.
func parseNormalizer(raw json.RawMessage) ([]func(string) string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     string            `json:"prepend"`
		Pattern     map[string]string `json:"pattern"`
		Content     string            `json:"content"`
		StripLeft   bool              `json:"strip_left"`
		StripRight  bool              `json:"strip_right"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	switch n.Type {
	case "NFC":
		return []func(string) string{norm.NFC.String}, nil
	case "NFD":
		return []func(string) string{norm.NFD.String}, nil
	case "NFKC":
		return []func(string) string{norm.NFKC.String}, nil
	case "NFKD":
		return []func(string) string{norm.NFKD.String}, nil
	case "Lowercase":
		return []func(string) string{strings.ToLower}, nil
	case "Prepend":
		// Hugging Face prepends to non-empty text only.
		return []func(string) string{func(s string) string {
			if s == "" {
				return s
			}
			return n.Prepend + s
		}}, nil
	case "Replace":
		from, ok := n.Pattern["String"]
		if !ok || from == "" {
			return nil, fmt.Errorf("a Replace pattern %v is not supported (only a non-empty String)", n.Pattern)
		}
		return []func(string) string{func(s string) string { return strings.ReplaceAll(s, from, n.Content) }}, nil
	case "Strip":
		return []func(string) string{func(s string) string {
			if n.StripLeft {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if n.StripRight {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}}, nil
	case "Sequence":
		var out []func(string) string
		for _, sub := range n.Normalizers {
			fs, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, fs...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("type %q is not supported", n.Type)
}

// parsePreTokenizer returns the pre-tokenizer steps to apply in order.
func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		Type           string            `json:"type"`
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        map[string]string `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
		AddPrefixSpace *bool             `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
		Replacement    string            `json:"replacement"`
		PrependScheme  string            `json:"prepend_scheme"`
		Split          *bool             `json:"split"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "Sequence":
		var out []preStep
		for _, sub := range p.Pretokenizers {
			steps, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, steps...)
		}
		return out, nil
	case "ByteLevel":
		st := preStep{byteLevel: true, prefixSpace: p.AddPrefixSpace != nil && *p.AddPrefixSpace}
		if p.UseRegex == nil || *p.UseRegex { // use_regex defaults to true
			re, err := compileSplit(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			st.split = re
		}
		return []preStep{st}, nil
	case "Split":
		var pattern string
		if r, ok := p.Pattern["Regex"]; ok {
			pattern = r
		} else if s, ok := p.Pattern["String"]; ok {
			pattern = quoteOniguruma(s)
		} else {
			return nil, fmt.Errorf("a Split pattern %v is neither Regex nor String", p.Pattern)
		}
		re, err := compileSplit(pattern)
		if err != nil {
			return nil, err
		}
		b, ok := behaviors[p.Behavior]
		if !ok {
			return nil, fmt.Errorf("a Split behavior %q is not supported (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)", p.Behavior)
		}
		return []preStep{{split: re, behavior: b, invert: p.Invert}}, nil
	case "Metaspace":
		ms, err := newMetaspace(p.Replacement, p.PrependScheme, p.AddPrefixSpace, p.Split)
		if err != nil {
			return nil, err
		}
		return []preStep{{metaspace: ms}}, nil
	}
	return nil, fmt.Errorf("type %q is not supported", p.Type)
}

// quoteOniguruma escapes a literal so that no character is special, using
// escapes that both Oniguruma and the translation to Go accept.
func quoteOniguruma(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// gpt2ByteToRune is GPT-2's reversible byte → character map: printable
// Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 onwards
// in byte order, so no token contains whitespace or control characters.
func gpt2ByteToRune() [256]rune {
	var m [256]rune
	next := rune(256)
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xa1 <= b && b <= 0xac) || (0xae <= b && b <= 0xff) {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}

// loadSpecials sets BOS, EOS and PAD from tokenizer_config.json, whose entries
// are a token's text, an object with its "content", or null, and whether
// decoding cleans up tokenization spaces (clean_up_tokenization_spaces;
// absent is false, as in transformers since 4.45). A missing file leaves
// them at -1; PAD falls back to EOS.
func (t *BPE) loadSpecials(path string) error {
	raw, err := plainfile.ReadFile(path, MaxConfigBytes)
	if errors.Is(err, fs.ErrNotExist) {
		t.pad = t.eos
		return nil
	}
	if err != nil {
		return err
	}
	var cfg struct {
		BOS     json.RawMessage `json:"bos_token"`
		EOS     json.RawMessage `json:"eos_token"`
		PAD     json.RawMessage `json:"pad_token"`
		CleanUp json.RawMessage `json:"clean_up_tokenization_spaces"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !isNull(cfg.CleanUp) {
		if err := json.Unmarshal(cfg.CleanUp, &t.cleanUpSpaces); err != nil {
			return fmt.Errorf("%s: clean_up_tokenization_spaces is not a boolean", path)
		}
	}
	for _, s := range []struct {
		key string
		raw json.RawMessage
		dst *int32
	}{{"bos_token", cfg.BOS, &t.bos}, {"eos_token", cfg.EOS, &t.eos}, {"pad_token", cfg.PAD, &t.pad}} {
		if isNull(s.raw) {
			continue
		}
		text, err := SpecialTokenText(s.raw)
		if err != nil {
			return fmt.Errorf("%s: %s %w", path, s.key, err)
		}
		id, ok := t.idOf(text)
		if !ok {
			return fmt.Errorf("%s: %s %q is not a token of tokenizer.json", path, s.key, text)
		}
		*s.dst = id
	}
	if t.pad < 0 {
		t.pad = t.eos
	}
	return nil
}

// SpecialTokenText reads a special-token entry of tokenizer_config.json
// (bos_token, eos_token, ...): the token's text, or an AddedToken object
// with its "content". Null entries are the caller's to skip (IsNull).
func SpecialTokenText(raw json.RawMessage) (string, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("is neither a string nor an object with content")
	}
	return *obj.Content, nil
}

// IsNull says whether a JSON entry is absent or null.
func IsNull(raw json.RawMessage) bool { return isNull(raw) }

// idOf finds a token's id, added tokens first.
func (t *BPE) idOf(text string) (int32, bool) {
	for id, tok := range t.tokens {
		if t.added[id] && tok == text {
			return int32(id), true
		}
	}
	id, ok := t.vocab[text]
	return id, ok
}

// loadStops sets the stop set: the eos_token of tokenizer_config.json and the
// eos_token_id (an id or a list of ids) of generation_config.json and
// config.json, when those files exist. Instruct models list their
// end-of-turn token there besides the end of text.
func (t *BPE) loadStops(dir string) error {
	add := func(id int32) {
		if id >= 0 && !slices.Contains(t.stops, id) {
			t.stops = append(t.stops, id)
		}
	}
	add(t.eos)
	for _, name := range []string{"generation_config.json", "config.json"} {
		path := filepath.Join(dir, name)
		raw, err := plainfile.ReadFile(path, MaxConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		var cfg struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		ids, err := parseIDs(cfg.EOS)
		if err != nil {
			return fmt.Errorf("%s: eos_token_id: %w", path, err)
		}
		for _, id := range ids {
			if id < 0 || int(id) >= len(t.tokens) {
				return fmt.Errorf("%s: eos_token_id %d is outside the vocabulary [0, %d)", path, id, len(t.tokens))
			}
			add(id)
		}
	}
	return nil
}

// parseIDs reads null, an id or a list of ids.
// maxTokenID bounds token ids (16.7 M: about a hundred times the largest
// vocabularies in use).
const maxTokenID = 1 << 24

func parseIDs(raw json.RawMessage) ([]int32, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%s is neither an id nor a list of ids", raw)
	}
	return many, nil
}

// StopTokens returns the ids that end a generation: EOS and the
// eos_token_id entries of generation_config.json and config.json.
func (t *BPE) StopTokens() []int32 { return slices.Clone(t.stops) }
