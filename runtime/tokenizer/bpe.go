package tokenizer

import (
	"cmp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// BPE is a Hugging Face BPE tokenizer, built by Load from tokenizer.json:
// byte-level (GPT-2, Llama-3, Qwen2 and their relatives) or over characters
// with byte fallback (SentencePiece style: Llama 2, Mistral, Gemma). It is
// immutable after Load and safe for concurrent use.
type BPE struct {
	name string

	vocab  map[string]int32 // model vocabulary
	tokens []string         // id → text: vocabulary token, or an added token's content
	// special marks ids Decode skips; added marks added tokens.
	special, added []bool
	merges         map[[2]int32]merge

	// byteLevel: pieces are spelled in GPT-2's byte alphabet (byteToRune);
	// otherwise they are spelled in characters (charID), a character outside
	// the vocabulary falling back to its bytes' <0xNN> tokens or to unk.
	byteLevel    bool
	byteToRune   [256]rune
	runeToByte   map[rune]byte
	byteID       [256]int32 // id of each byte's single-character token
	charID       map[rune]int32
	byteFallback bool
	fallbackID   [256]int32 // id of <0xNN>, or -1
	unk          int32
	fuseUnk      bool

	normalizers []func(string) string
	steps       []preStep
	decoders    []decodeStep
	// plainDecoder: the decoder is ByteLevel alone or absent, which Decode
	// handles without building the token list.
	plainDecoder bool
	post         []int32 // EncodeSpecial's template: ids, and −1 where the text goes; nil: none
	// rawAdded are the added tokens matched in the raw text, normAdded those
	// matched in the normalized text (Hugging Face's "normalized" flag).
	rawAdded, normAdded addedSet
	ignoreMerges        bool

	bos, eos, pad int32
	stops         []int32
	// cleanUpSpaces is tokenizer_config.json's clean_up_tokenization_spaces.
	cleanUpSpaces bool
}

// merge is the result of merging an adjacent pair: its priority and new id.
type merge struct {
	rank int32
	id   int32
}

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id             int32
	content        string
	singleWord     bool
	lstrip, rstrip bool
}

// addedSet lists added tokens by the first byte of their content, longest
// first, for leftmost-longest matching.
type addedSet struct {
	byFirst [256][]*addedToken
	n       int
}

func (s *addedSet) sort() {
	s.n = 0
	for i := range s.byFirst {
		slices.SortStableFunc(s.byFirst[i], func(a, b *addedToken) int {
			return cmp.Compare(len(b.content), len(a.content))
		})
		s.n += len(s.byFirst[i])
	}
}

// preStep is one pre-tokenizer: a Split, Metaspace, or the byte-level step,
// which adds the prefix space and applies the GPT-2 split if use_regex (else
// split is nil).
type preStep struct {
	split       *splitRegex
	behavior    behavior
	invert      bool // the pattern matches the pieces, not the delimiters
	byteLevel   bool
	prefixSpace bool
	metaspace   *metaspace
}

// Encode tokenizes text: added tokens found literally in the text become
// their ids; the text between them is normalized, pre-tokenized and encoded
// with BPE. No BOS or EOS is added (see EncodeSpecial).
func (t *BPE) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text)/3+1)
	var sc scratch
	emit := func(piece string) { ids = t.bpe(piece, ids, &sc) }
	t.rawAdded.each(text, func(raw string, start int, id int32) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		for _, n := range t.normalizers {
			raw = n(raw)
		}
		if t.normAdded.n == 0 {
			t.preTokenize(raw, start == 0, emit)
			return
		}
		t.normAdded.each(raw, func(plain string, sub int, id int32) {
			if id >= 0 {
				ids = append(ids, id)
				return
			}
			t.preTokenize(plain, start == 0 && sub == 0, emit)
		})
	})
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// EncodeSpecial tokenizes text like Encode and adds the special tokens of
// tokenizer.json's post-processor template (e.g. Llama's BOS), as Hugging
// Face's encode with add_special_tokens does. Chat prompts rendered from a
// template already spell their special tokens: encode those with Encode.
func (t *BPE) EncodeSpecial(text string) []int32 {
	ids := t.Encode(text)
	if t.post == nil {
		return ids
	}
	out := make([]int32, 0, len(ids)+len(t.post))
	for _, id := range t.post {
		if id < 0 {
			out = append(out, ids...)
		} else {
			out = append(out, id)
		}
	}
	return out
}

// scratch holds buffers that one Encode call reuses from piece to piece.
type scratch struct {
	mapped []byte
	syms   []symbol
	queue  mergeQueue
}

// each calls fn for each added token of s (id ≥ 0) and each stretch of
// plain text between them (id = −1, start its byte offset in text), in order.
// Matches are leftmost-longest, as Hugging Face's Aho-Corasick matcher finds
// them.
func (s *addedSet) each(text string, fn func(plain string, start int, id int32)) {
	if s.n == 0 {
		if text != "" {
			fn(text, 0, -1)
		}
		return
	}
	plainStart := 0
	for i := 0; i < len(text); {
		a := s.at(text, i)
		if a == nil {
			i++
			continue
		}
		st, e := i, i+len(a.content)
		if a.lstrip {
			for st > plainStart {
				r, w := utf8.DecodeLastRuneInString(text[plainStart:st])
				if !unicode.IsSpace(r) {
					break
				}
				st -= w
			}
		}
		if a.rstrip {
			for e < len(text) {
				r, w := utf8.DecodeRuneInString(text[e:])
				if !unicode.IsSpace(r) {
					break
				}
				e += w
			}
		}
		if st > plainStart {
			fn(text[plainStart:st], plainStart, -1)
		}
		fn("", st, a.id)
		plainStart, i = e, e
	}
	if plainStart < len(text) {
		fn(text[plainStart:], plainStart, -1)
	}
}

// at returns the longest added token that matches text at i, or nil.
func (s *addedSet) at(text string, i int) *addedToken {
	for _, a := range s.byFirst[text[i]] {
		if !strings.HasPrefix(text[i:], a.content) {
			continue
		}
		if a.singleWord {
			// Only as a whole word: no alphanumeric character on either side.
			if r, _ := utf8.DecodeLastRuneInString(text[:i]); i > 0 && isAlnum(r) {
				continue
			}
			if e := i + len(a.content); e < len(text) {
				if r, _ := utf8.DecodeRuneInString(text[e:]); isAlnum(r) {
					continue
				}
			}
		}
		return a
	}
	return nil
}

func isAlnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }

// preTokenize applies the pre-tokenizer steps in order and calls emit for
// each resulting piece. first says whether text starts the input (for
// Metaspace's prepend_scheme "first"). In byte-level mode the pieces are raw
// text: the byte-level step (always the last) splits and adds the prefix
// space, and bpe then reads each byte as its byte-level character.
func (t *BPE) preTokenize(text string, first bool, emit func(piece string)) {
	if text == "" {
		return
	}
	t.applySteps(0, text, first, emit)
}

func (t *BPE) applySteps(i int, p string, first bool, emit func(string)) {
	if i == len(t.steps) {
		emit(p)
		return
	}
	st := &t.steps[i]
	switch {
	case st.byteLevel:
		if st.prefixSpace && !strings.HasPrefix(p, " ") {
			p = " " + p
		}
		if st.split == nil {
			t.applySteps(i+1, p, first, emit)
			return
		}
		st.split.each(p, false, func(q string) { t.applySteps(i+1, q, first, emit) })
	case st.metaspace != nil:
		n := 0
		st.metaspace.each(p, first, func(q string) {
			t.applySteps(i+1, q, first && n == 0, emit)
			n++
		})
	default:
		n := 0
		st.split.pieces(p, st.behavior, st.invert, func(q string) {
			t.applySteps(i+1, q, first && n == 0, emit)
			n++
		})
	}
}

// bpe appends the ids of one pre-tokenized piece of raw text to ids.
func (t *BPE) bpe(piece string, ids []int32, sc *scratch) []int32 {
	if piece == "" {
		return ids
	}
	if t.ignoreMerges && t.byteLevel {
		// The whole piece, spelled in byte-level characters, may be a token.
		sc.mapped = sc.mapped[:0]
		for i := 0; i < len(piece); i++ {
			sc.mapped = utf8.AppendRune(sc.mapped, t.byteToRune[piece[i]])
		}
		if id, ok := t.vocab[string(sc.mapped)]; ok {
			return append(ids, id)
		}
	}
	syms := sc.syms[:0]
	if t.byteLevel {
		// Symbols start as the single bytes, each of which Load found in the
		// vocabulary.
		for i := 0; i < len(piece); i++ {
			syms = append(syms, symbol{id: t.byteID[piece[i]]})
		}
	} else {
		if t.ignoreMerges {
			if id, ok := t.vocab[piece]; ok {
				return append(ids, id)
			}
		}
		syms = t.charSymbols(piece, syms)
		if len(syms) == 0 {
			return ids
		}
	}
	for i := range syms {
		syms[i].prev, syms[i].next = i-1, i+1
	}
	syms[len(syms)-1].next = -1
	sc.syms = syms

	// Merge the lowest-ranked adjacent pair, leftmost first, until none is
	// left: a heap of candidate merges, stale entries skipped when popped,
	// as in Hugging Face's implementation.
	q := sc.queue[:0]
	defer func() { sc.queue = q[:0] }()
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := t.merges[[2]int32{syms[i].id, syms[i+1].id}]; ok {
			q.push(candidate{pos: i, rank: m.rank, id: m.id})
		}
	}
	for len(q) > 0 {
		c := q.pop()
		s := &syms[c.pos]
		if s.gone || s.next < 0 {
			continue
		}
		nx := &syms[s.next]
		if m, ok := t.merges[[2]int32{s.id, nx.id}]; !ok || m.id != c.id {
			continue // the pair changed since this candidate was queued
		}
		s.id = c.id
		nx.gone = true
		s.next = nx.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
			if m, ok := t.merges[[2]int32{s.id, syms[s.next].id}]; ok {
				q.push(candidate{pos: c.pos, rank: m.rank, id: m.id})
			}
		}
		if s.prev >= 0 {
			if m, ok := t.merges[[2]int32{syms[s.prev].id, s.id}]; ok {
				q.push(candidate{pos: s.prev, rank: m.rank, id: m.id})
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}

// symbol is a node of the doubly linked list of a piece being merged.
type symbol struct {
	id         int32
	prev, next int
	gone       bool
}

// candidate is a queued merge of the symbol at pos with its successor.
type candidate struct {
	pos  int
	rank int32
	id   int32
}

// mergeQueue is a binary min-heap of candidates ordered by rank, then
// position (leftmost first). Hand-written rather than container/heap, which
// boxes every element.
type mergeQueue []candidate

func (c candidate) before(d candidate) bool {
	if c.rank != d.rank {
		return c.rank < d.rank
	}
	return c.pos < d.pos
}

func (q *mergeQueue) push(c candidate) {
	h := append(*q, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*q = h
}

func (q *mergeQueue) pop() candidate {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if r := l + 1; r < len(h) && h[r].before(h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// Decode joins the tokens of ids, skipping special tokens and unknown ids.
// In byte-level mode vocabulary tokens are mapped back from byte-level
// characters to bytes (a token with a character outside that alphabet is
// taken as its UTF-8 text, as Hugging Face's decoder does) and added tokens
// decode to their content; otherwise the tokens go through tokenizer.json's
// decoder (Replace, ByteFallback, Fuse, Strip, Metaspace). The bytes are
// returned as they are: an incomplete UTF-8 sequence, as at the end of a
// partial generation, is kept, not replaced by U+FFFD. Where
// tokenizer_config.json sets clean_up_tokenization_spaces (Llama 3.x does),
// the text is then cleaned up as transformers' decode does
// (CleanUpTokenization).
func (t *BPE) Decode(ids []int32) string { return t.cleanUp(t.decode(ids, true)) }

// DecodeSpecial is Decode that keeps special tokens (as their text).
func (t *BPE) DecodeSpecial(ids []int32) string { return t.cleanUp(t.decode(ids, false)) }

func (t *BPE) cleanUp(s string) string {
	if t.cleanUpSpaces {
		return CleanUpTokenization(s)
	}
	return s
}

// CleanUpTokenization is transformers' clean_up_tokenization, which its
// decode applies when clean_up_tokenization_spaces is set: the spaces
// before punctuation and English contractions that word-level tokenizers
// left are removed, each replacement made through the whole text in turn,
// in this order: " ." " ?" " !" " ," then " ' " (to "'"), " n't", " 'm",
// " 's", " 've", " 're".
func CleanUpTokenization(s string) string {
	for _, r := range cleanUps {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

var cleanUps = [][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func (t *BPE) decode(ids []int32, skipSpecial bool) string {
	if !t.byteLevel || !t.plainDecoder {
		toks := make([]string, 0, len(ids))
		for _, id := range ids {
			if id < 0 || int(id) >= len(t.tokens) || (skipSpecial && t.special[id]) {
				continue
			}
			toks = append(toks, t.tokens[id])
		}
		return t.runDecoders(toks)
	}
	var out []byte
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) || (skipSpecial && t.special[id]) {
			continue
		}
		tok := t.tokens[id]
		if t.added[id] {
			out = append(out, tok...)
			continue
		}
		out = t.appendBytes(out, tok)
	}
	return string(out)
}

// appendBytes appends the bytes a byte-level token stands for.
func (t *BPE) appendBytes(out []byte, tok string) []byte {
	n := len(out)
	for _, r := range tok {
		b, ok := t.runeToByte[r]
		if !ok {
			return append(out[:n], tok...)
		}
		out = append(out, b)
	}
	return out
}

// VocabSize is one more than the largest id of the vocabulary and added tokens.
func (t *BPE) VocabSize() int { return len(t.tokens) }

// BOS returns the id of tokenizer_config.json's bos_token, or -1.
func (t *BPE) BOS() int32 { return t.bos }

// EOS returns the id of tokenizer_config.json's eos_token, or -1.
func (t *BPE) EOS() int32 { return t.eos }

// PAD returns the id of tokenizer_config.json's pad_token; without one, EOS
// (the usual choice when padding is masked out anyway).
func (t *BPE) PAD() int32 { return t.pad }

// Name returns "bpe:" and the name of the directory Load read.
func (t *BPE) Name() string { return t.name }
