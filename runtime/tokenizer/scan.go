package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Go's regexp runs the pre-tokenizer patterns at about 2 MB/s here, so the
// three patterns nearly every byte-level BPE uses are also implemented as
// hand-written scanners (about 35 MB/s, BenchmarkSplitLlama3), which
// compileSplit picks when the pattern is literally one of them. Each scanner
// returns the end of the match that starts at pos; with these patterns every
// character starts a match, so the leftmost match is always at pos.
// TestScannersMatchRegex checks them against the regex path on random text.

// Pre-tokenizer patterns of the model families the scanners cover.
const (
	// llama3Pattern splits Llama-3 text; digits go in runs of up to three.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Llama-3's with single digits.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Pattern is the split of the ByteLevel pre-tokenizer with use_regex.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// scannerFor returns the hand-written scanner of a known pattern, or nil.
func scannerFor(pattern string) func(text string, pos int) int {
	switch pattern {
	case llama3Pattern:
		return func(text string, pos int) int { return scanLlama(text, pos, 3) }
	case qwen2Pattern:
		return func(text string, pos int) int { return scanLlama(text, pos, 1) }
	case gpt2Pattern:
		return scanGPT2
	}
	return nil
}

func isSpace(r rune) bool  { return unicode.IsSpace(r) } // Unicode White_Space, as Oniguruma's \s
func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// runeAt decodes the rune at i, or returns (-1, 0) at the end of text. Like
// Go's regexp, an invalid byte reads as U+FFFD of width 1.
func runeAt(text string, i int) (rune, int) {
	if i >= len(text) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(text[i:])
}

// span returns the end of the run of characters satisfying ok from i, at
// most max of them (max < 0: no limit).
func span(text string, i int, ok func(rune) bool, max int) int {
	for n := 0; max < 0 || n < max; n++ {
		r, w := runeAt(text, i)
		if w == 0 || !ok(r) {
			break
		}
		i += w
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at pos,
// returning its end or 0. With fold, letters match case-insensitively as
// (?i) does (Unicode simple folding, so ſ matches s).
func contraction(text string, pos int, fold bool) int {
	eq := func(i int, want string) (int, bool) {
		r, w := runeAt(text, i)
		if w == 0 {
			return 0, false
		}
		if fold {
			return i + w, strings.EqualFold(string(r), want)
		}
		return i + w, string(r) == want
	}
	i := pos + 1
	for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
		j, ok := eq(i, c[:1])
		if ok && len(c) == 2 {
			j, ok = eq(j, c[1:])
		}
		if ok {
			return j
		}
	}
	return 0
}

// wsEnd handles the whitespace alternatives shared by the patterns, at a
// whitespace character: \s*[\r\n]+ (when newlines is set) ends after the
// run's last newline; \s+(?!\S) takes the run, less its last character when
// a non-space follows and the run has two or more; \s+ takes the rest.
func wsEnd(text string, pos int, newlines bool) int {
	q, lastNL, n, lastW := pos, -1, 0, 0
	for {
		r, w := runeAt(text, q)
		if w == 0 || !isSpace(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = q + w
		}
		q, n, lastW = q+w, n+1, w
	}
	switch {
	case newlines && lastNL >= 0:
		return lastNL
	case q == len(text) || n == 1:
		return q
	}
	return q - lastW
}

// scanLlama matches the Llama-3 pattern (maxDigits 3) or Qwen2's (1) at pos.
func scanLlama(text string, pos, maxDigits int) int {
	r, w := runeAt(text, pos)
	if r == '\'' {
		if e := contraction(text, pos, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return span(text, pos, isLetter, -1)
	}
	if r != '\r' && r != '\n' && !isNumber(r) {
		if r2, _ := runeAt(text, pos+w); isLetter(r2) {
			return span(text, pos+w, isLetter, -1)
		}
	}
	// \p{N}{1,maxDigits}
	if isNumber(r) {
		return span(text, pos, isNumber, maxDigits)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if s := optionalSpace(text, pos, r); s >= 0 {
		e := span(text, s, isOther, -1)
		return span(text, e, func(r rune) bool { return r == '\r' || r == '\n' }, -1)
	}
	return wsEnd(text, pos, true)
}

// optionalSpace returns where ' ?[^\s\p{L}\p{N}]' puts the first non-space
// character of a match at pos, or -1 if there is no such match.
func optionalSpace(text string, pos int, r rune) int {
	if r == ' ' {
		if r2, _ := runeAt(text, pos+1); r2 >= 0 && isOther(r2) {
			return pos + 1
		}
		return -1
	}
	if isOther(r) {
		return pos
	}
	return -1
}

// scanGPT2 matches the GPT-2 pattern at pos.
func scanGPT2(text string, pos int) int {
	r, _ := runeAt(text, pos)
	if r == '\'' {
		if e := contraction(text, pos, false); e > 0 {
			return e
		}
	}
	s := pos
	if r == ' ' {
		s = pos + 1
	}
	r2, _ := runeAt(text, s)
	switch {
	case r2 >= 0 && isLetter(r2):
		return span(text, s, isLetter, -1)
	case r2 >= 0 && isNumber(r2):
		return span(text, s, isNumber, -1)
	case r2 >= 0 && isOther(r2):
		return span(text, s, isOther, -1)
	}
	return wsEnd(text, pos, false)
}
