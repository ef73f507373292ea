package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Hugging Face tokenizers compile pre-tokenizer patterns with Oniguruma,
// whose \s, \d and \w are Unicode-aware and which supports look-around. Go's
// regexp (RE2) has ASCII-only \s, \d, \w and no look-around, so patterns are
// translated:
//
//   - \s, \S, \d, \D, \w, \W become the Unicode classes Oniguruma means
//     (White_Space; Nd; letters, marks, Nd and connector punctuation);
//     \S, \D and \W are refused inside [...] (RE2 cannot subtract classes).
//   - ^ and $ outside classes become line anchors, as in Oniguruma's Ruby
//     syntax.
//   - A top-level alternative written exactly \s+(?!\S) (GPT-2, Llama-3,
//     Qwen2 all have one) is emulated exactly: it is matched as \s+ and the
//     match is then shortened by one character when a non-space follows,
//     which is what backtracking into the look-ahead does; a one-character
//     run followed by a non-space falls through to the later alternatives.
//   - Any other look-around, atomic group or possessive quantifier is an
//     error at Load.
//
// Go's leftmost-first alternation and greedy quantifiers pick the same match
// as a backtracking engine for patterns without back-references, so the
// translated patterns split text the same way. (Checked once, outside the
// tests, against Python's backtracking regex module for the GPT-2, Llama-3
// and Qwen2 patterns: no difference on 20,000 random strings each.)

// Unicode White_Space, which Oniguruma's \s matches.
const wsClass = `\t\n\v\f\r\x{85}\p{Z}`

// Oniguruma's Unicode \w: letters, marks, decimal digits, connector punctuation.
const wordClass = `\p{L}\p{M}\p{Nd}\p{Pc}`

// lookaheadWS is the one look-ahead alternative the splitter emulates.
const lookaheadWS = `\s+(?!\S)`

// splitRegex finds pre-tokenizer pieces the way Oniguruma would.
type splitRegex struct {
	re *regexp.Regexp
	// wsGroup is the submatch index of the emulated \s+(?!\S) alternative, or -1.
	wsGroup int
	// rest matches, anchored, the alternatives after the emulated one (nil if none).
	rest *regexp.Regexp
	// scan, when set, is a hand-written equivalent of re (see scan.go).
	scan func(text string, pos int) int
}

// compileSplit translates an Oniguruma pattern and compiles it.
func compileSplit(pattern string) (*splitRegex, error) {
	alts, err := topLevelAlternatives(pattern)
	if err != nil {
		return nil, err
	}
	var parts []string
	wsAt := -1
	for i, a := range alts {
		if a == lookaheadWS {
			if wsAt >= 0 {
				return nil, fmt.Errorf("pattern %q: %s appears twice", pattern, lookaheadWS)
			}
			wsAt = i
			parts = append(parts, `(?P<stxws>[`+wsClass+`]+)`)
			continue
		}
		t, err := translate(a)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", pattern, err)
		}
		parts = append(parts, t)
	}
	re, err := regexp.Compile(strings.Join(parts, "|"))
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	s := &splitRegex{re: re, wsGroup: -1, scan: scannerFor(pattern)}
	if wsAt >= 0 {
		s.wsGroup = re.SubexpIndex("stxws")
		if wsAt+1 < len(parts) {
			s.rest = regexp.MustCompile(`^(?:` + strings.Join(parts[wsAt+1:], "|") + `)`)
		}
	}
	return s, nil
}

// topLevelAlternatives splits a pattern at the | that are outside groups and
// character classes.
func topLevelAlternatives(p string) ([]string, error) {
	var alts []string
	depth, start := 0, 0
	inClass := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			i++ // skip the escaped character
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			// A ']' right after '[' or '[^' is a literal.
			if i+1 < len(p) && p[i+1] == '^' {
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				i++
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("pattern %q: unbalanced )", p)
			}
		case c == '|' && depth == 0:
			alts = append(alts, p[start:i])
			start = i + 1
		}
	}
	if depth != 0 || inClass {
		return nil, fmt.Errorf("pattern %q: unbalanced group or class", p)
	}
	return append(alts, p[start:]), nil
}

// translate rewrites one Oniguruma alternative into RE2 syntax.
func translate(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\\' && i+1 < len(p) {
			e := p[i+1]
			i++
			var in, out string
			switch e {
			case 's':
				in, out = wsClass, `[`+wsClass+`]`
			case 'S':
				out = `[^` + wsClass + `]`
			case 'd':
				in, out = `\p{Nd}`, `\p{Nd}`
			case 'D':
				out = `\P{Nd}`
			case 'w':
				in, out = wordClass, `[`+wordClass+`]`
			case 'W':
				out = `[^` + wordClass + `]`
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
				// \p{…}, \x{…}: copy the braces whole, so that a quantifier
				// after them is not mistaken for a possessive one.
				if i+1 < len(p) && p[i+1] == '{' {
					if j := strings.IndexByte(p[i+1:], '}'); j >= 0 {
						b.WriteString(p[i+1 : i+2+j])
						i += 1 + j
					}
				}
				continue
			}
			if inClass {
				if in == "" {
					return "", fmt.Errorf(`\%c inside a character class is not supported`, e)
				}
				b.WriteString(in)
			} else {
				b.WriteString(out)
			}
			continue
		}
		switch {
		case inClass:
			if c == ']' {
				inClass = false
			}
			b.WriteByte(c)
			continue
		case c == '[':
			inClass = true
			b.WriteByte(c)
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
			continue
		case c == '(' && i+2 < len(p) && p[i+1] == '?' && strings.ContainsRune("=!<>", rune(p[i+2])):
			if p[i+2] == '<' && i+3 < len(p) && p[i+3] != '=' && p[i+3] != '!' {
				break // (?<name>...) is a named group, which Go accepts
			}
			return "", fmt.Errorf("look-around and atomic groups (%q) are not supported", p[i:min(i+4, len(p))])
		case (c == '+' || c == '*' || c == '?') && i+1 < len(p) && p[i+1] == '+':
			return "", fmt.Errorf("possessive quantifiers (%q) are not supported", p[i:i+2])
		case c == '^':
			b.WriteString(`(?m:^)`)
			continue
		case c == '$':
			b.WriteString(`(?m:$)`)
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// find returns the first match at or after pos as [start, end), or ok = false.
func (s *splitRegex) find(text string, pos int) (start, end int, ok bool) {
	for pos <= len(text) {
		m := s.re.FindStringSubmatchIndex(text[pos:])
		if m == nil {
			return 0, 0, false
		}
		start, end = pos+m[0], pos+m[1]
		if s.wsGroup < 0 || m[2*s.wsGroup] < 0 || end == len(text) {
			return start, end, true
		}
		// The \s+(?!\S) alternative matched a whitespace run that a non-space
		// follows: backtracking gives back the last character.
		_, last := utf8.DecodeLastRuneInString(text[start:end])
		if end-last > start {
			return start, end - last, true
		}
		// A single character: the look-ahead fails, so Oniguruma tries the
		// later alternatives here, then moves on.
		if s.rest != nil {
			if r := s.rest.FindStringIndex(text[start:]); r != nil {
				return start, start + r[1], true
			}
		}
		_, w := utf8.DecodeRuneInString(text[start:])
		pos = start + w
	}
	return 0, 0, false
}

// each cuts text into the matches of s and the gaps between them and calls
// fn on each, in order: both (Hugging Face's "Isolated" behaviour), or only
// the gaps with removeMatches ("Removed"). Empty matches produce no pieces.
func (s *splitRegex) each(text string, removeMatches bool, fn func(string)) {
	s.walk(text, func(start, end int, match bool) {
		if !match || !removeMatches {
			fn(text[start:end])
		}
	})
}

// walk calls fn on each match of s in text and each gap between them, in
// order, saying which is a match. Empty matches produce no pieces.
func (s *splitRegex) walk(text string, fn func(start, end int, match bool)) {
	if s.scan != nil {
		// Every character starts a match of a scanned pattern: no gaps.
		for pos := 0; pos < len(text); {
			e := s.scan(text, pos)
			fn(pos, e, true)
			pos = e
		}
		return
	}
	pos, gap := 0, 0
	for pos <= len(text) {
		st, en, ok := s.find(text, pos)
		if !ok {
			break
		}
		if en == st { // an empty match: step over one character
			_, w := utf8.DecodeRuneInString(text[st:])
			if w == 0 {
				break
			}
			pos = st + w
			continue
		}
		if st > gap {
			fn(gap, st, false)
		}
		fn(st, en, true)
		pos, gap = en, en
	}
	if gap < len(text) {
		fn(gap, len(text), false)
	}
}
