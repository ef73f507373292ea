package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file holds the parts of the tokenizer.json pipeline beyond byte-level
// BPE: character-level symbols with byte fallback, the Metaspace
// pre-tokenizer, the Split behaviours, the decoders and the post-processor.

// charSymbols appends the initial symbols of a piece spelled in characters:
// each character's token, else (byte_fallback) the <0xNN> tokens of its
// UTF-8 bytes, else the unknown token, consecutive unknowns fused into one
// with fuse_unk. A character with none of these is dropped.
func (t *BPE) charSymbols(piece string, syms []symbol) []symbol {
	prevUnk := false
	for i, r := range piece {
		w := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, w = utf8.DecodeRuneInString(piece[i:])
		}
		// An invalid byte decodes as U+FFFD of width 1: it is not that character.
		valid := r != utf8.RuneError || w == 3
		if id, ok := t.charID[r]; ok && valid {
			syms = append(syms, symbol{id: id})
			prevUnk = false
			continue
		}
		if t.byteFallback {
			all := true
			for j := i; j < i+w; j++ {
				if t.fallbackID[piece[j]] < 0 {
					all = false
					break
				}
			}
			if all {
				for j := i; j < i+w; j++ {
					syms = append(syms, symbol{id: t.fallbackID[piece[j]]})
				}
				prevUnk = false
				continue
			}
		}
		if t.unk < 0 {
			continue
		}
		if !(t.fuseUnk && prevUnk) {
			syms = append(syms, symbol{id: t.unk})
		}
		prevUnk = true
	}
	return syms
}

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement
// character, which is prepended to the text (always, or only to the start of
// the input with prepend_scheme "first"), and the text is optionally split
// before each replacement character.
type metaspace struct {
	repl          string
	always, first bool // prepend schemes
	split         bool
}

func newMetaspace(repl, scheme string, addPrefixSpace, split *bool) (*metaspace, error) {
	if utf8.RuneCountInString(repl) != 1 {
		return nil, fmt.Errorf("Metaspace replacement %q is not one character", repl)
	}
	m := &metaspace{repl: repl, split: split == nil || *split}
	switch scheme {
	case "always":
		m.always = true
	case "first":
		m.first = true
	case "never":
	case "":
		// Older files: add_prefix_space, which defaults to true.
		m.always = addPrefixSpace == nil || *addPrefixSpace
	default:
		return nil, fmt.Errorf("Metaspace prepend_scheme %q is not supported (always, first, never)", scheme)
	}
	return m, nil
}

func (m *metaspace) each(text string, first bool, fn func(string)) {
	text = strings.ReplaceAll(text, " ", m.repl)
	if (m.always || (m.first && first)) && !strings.HasPrefix(text, m.repl) {
		text = m.repl + text
	}
	if !m.split {
		fn(text)
		return
	}
	// Split before each replacement character (MergedWithNext).
	start := 0
	for i := len(m.repl); i < len(text); {
		j := strings.Index(text[i:], m.repl)
		if j < 0 {
			break
		}
		fn(text[start : i+j])
		start = i + j
		i = start + len(m.repl)
	}
	fn(text[start:])
}

// behavior is what a Split pre-tokenizer does with the matches of its pattern.
type behavior uint8

const (
	isolated behavior = iota
	removed
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{
	"Isolated": isolated, "Removed": removed, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

// pieces cuts text by the matches of s and calls fn on each piece, as Hugging
// Face's Split with behaviour b does: matches apart (Isolated), dropped
// (Removed), glued to the piece before (MergedWithPrevious) or after
// (MergedWithNext), or runs of matches joined (Contiguous). With invert the
// gaps between matches are the delimiters instead.
func (s *splitRegex) pieces(text string, b behavior, invert bool, fn func(string)) {
	if !invert && (b == isolated || b == removed) {
		s.each(text, b == removed, fn)
		return
	}
	type span struct {
		start, end int
		match      bool
	}
	var spans []span
	s.walk(text, func(start, end int, match bool) { spans = append(spans, span{start, end, match != invert}) })
	var out []span
	switch b {
	case isolated:
		out = spans
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		nextMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !nextMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			nextMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		for i, sp := range spans {
			if i > 0 && sp.match && spans[i-1].match {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
		}
	}
	for _, sp := range out {
		fn(text[sp.start:sp.end])
	}
}

// decodeStep is one decoder of tokenizer.json: it maps the list of token
// strings to a new list, as Hugging Face's decode_chain does.
type decodeStep func(t *BPE, toks []string) []string

// parseDecoder returns the decoder steps to apply in order; nil for none.
func parseDecoder(raw json.RawMessage) ([]decodeStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	var d struct {
		Type          string            `json:"type"`
		Decoders      []json.RawMessage `json:"decoders"`
		Pattern       map[string]string `json:"pattern"`
		Content       string            `json:"content"`
		Start, Stop   int
		Replacement   string `json:"replacement"`
		PrependScheme string `json:"prepend_scheme"`
		AddPrefixSpc  *bool  `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	switch d.Type {
	case "Sequence":
		var out []decodeStep
		for _, sub := range d.Decoders {
			steps, err := parseDecoder(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, steps...)
		}
		return out, nil
	case "ByteLevel":
		return []decodeStep{decodeByteLevel}, nil
	case "Replace":
		from, ok := d.Pattern["String"]
		if !ok || from == "" {
			return nil, fmt.Errorf("a Replace pattern %v is not supported (only a non-empty String)", d.Pattern)
		}
		to := d.Content
		return []decodeStep{func(_ *BPE, toks []string) []string {
			for i, s := range toks {
				toks[i] = strings.ReplaceAll(s, from, to)
			}
			return toks
		}}, nil
	case "ByteFallback":
		return []decodeStep{decodeByteFallback}, nil
	case "Fuse":
		return []decodeStep{func(_ *BPE, toks []string) []string { return []string{strings.Join(toks, "")} }}, nil
	case "Strip":
		if utf8.RuneCountInString(d.Content) != 1 || d.Start < 0 || d.Stop < 0 {
			return nil, fmt.Errorf("a Strip of %q (start %d, stop %d) is not supported", d.Content, d.Start, d.Stop)
		}
		c, start, stop := d.Content, d.Start, d.Stop
		return []decodeStep{func(_ *BPE, toks []string) []string {
			for i, s := range toks {
				for n := 0; n < start && strings.HasPrefix(s, c); n++ {
					s = s[len(c):]
				}
				for n := 0; n < stop && strings.HasSuffix(s, c); n++ {
					s = s[:len(s)-len(c)]
				}
				toks[i] = s
			}
			return toks
		}}, nil
	case "Metaspace":
		ms, err := newMetaspace(d.Replacement, d.PrependScheme, d.AddPrefixSpc, nil)
		if err != nil {
			return nil, err
		}
		repl, strip := ms.repl, ms.always || ms.first
		return []decodeStep{func(_ *BPE, toks []string) []string {
			for i, s := range toks {
				s = strings.ReplaceAll(s, repl, " ")
				if i == 0 && strip {
					s = strings.TrimPrefix(s, " ")
				}
				toks[i] = s
			}
			return toks
		}}, nil
	}
	return nil, fmt.Errorf("type %q is not supported (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)", d.Type)
}

// runDecoders applies the decoder steps and joins the result.
func (t *BPE) runDecoders(toks []string) string {
	for _, d := range t.decoders {
		toks = d(t, toks)
	}
	return strings.Join(toks, "")
}

// decodeByteLevel maps each token's byte-level characters back to bytes;
// added tokens and tokens with a character outside the alphabet stay as they
// are.
func decodeByteLevel(t *BPE, toks []string) []string {
	if t.runeToByte == nil {
		return toks
	}
	for i, s := range toks {
		toks[i] = string(t.appendBytes(nil, s))
	}
	return toks
}

// decodeByteFallback turns runs of <0xNN> tokens into their bytes. The bytes
// are kept even where they are not valid UTF-8 (Hugging Face writes U+FFFD):
// a generation cut in the middle of a character decodes to its prefix.
func decodeByteFallback(_ *BPE, toks []string) []string {
	out := toks[:0]
	var pending []byte
	for _, s := range toks {
		if b, ok := fallbackByte(s); ok {
			pending = append(pending, b)
			continue
		}
		if len(pending) > 0 {
			out = append(out, string(pending))
			pending = pending[:0]
		}
		out = append(out, s)
	}
	if len(pending) > 0 {
		out = append(out, string(pending))
	}
	return out
}

// fallbackByte reads a byte-fallback token <0xNN>.
func fallbackByte(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

// parsePostProcessor returns EncodeSpecial's template for one sequence: the
// special token ids with −1 where the text goes; nil when the post-processor
// adds nothing.
func parsePostProcessor(raw json.RawMessage, t *BPE) ([]int32, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "ByteLevel":
		return nil, nil // offsets only
	case "Sequence":
		var out []int32
		for _, sub := range p.Processors {
			tmpl, err := parsePostProcessor(sub, t)
			if err != nil {
				return nil, err
			}
			if tmpl != nil {
				if out != nil {
					return nil, fmt.Errorf("more than one TemplateProcessing is not supported")
				}
				out = tmpl
			}
		}
		return out, nil
	case "TemplateProcessing":
		out := []int32{}
		seq := 0
		for _, item := range p.Single {
			switch {
			case item.Sequence != nil:
				out = append(out, -1)
				seq++
			case item.SpecialToken != nil:
				st, ok := p.SpecialTokens[item.SpecialToken.ID]
				if !ok || len(st.IDs) == 0 {
					return nil, fmt.Errorf("TemplateProcessing: special token %q has no ids", item.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || int(id) >= len(t.tokens) {
						return nil, fmt.Errorf("TemplateProcessing: special token %q has id %d outside the vocabulary", item.SpecialToken.ID, id)
					}
				}
				out = append(out, st.IDs...)
			default:
				return nil, fmt.Errorf("TemplateProcessing: an item of single is neither Sequence nor SpecialToken")
			}
		}
		if seq != 1 {
			return nil, fmt.Errorf("TemplateProcessing: single has %d sequences, want 1", seq)
		}
		return out, nil
	}
	return nil, fmt.Errorf("type %q is not supported (TemplateProcessing, ByteLevel, Sequence)", p.Type)
}
