package tokenizer

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// The expected pieces are worked out by hand from backtracking semantics
// (Oniguruma's, which Hugging Face uses): alternatives in order, greedy
// quantifiers giving back characters until the rest of the pattern matches.
func TestSplitPatterns(t *testing.T) {
	cases := []struct {
		pattern, in string
		want        []string
	}{
		{llama3Pattern, "Hello world", []string{"Hello", " world"}},
		{llama3Pattern, "I'm here", []string{"I", "'m", " here"}},
		{llama3Pattern, "HE'LL go", []string{"HE", "'LL", " go"}},
		{llama3Pattern, "12345", []string{"123", "45"}},
		{llama3Pattern, "ABC123def", []string{"ABC", "123", "def"}},
		// \s+(?!\S) gives back the last space, which then prefixes the word.
		{llama3Pattern, "a  b", []string{"a", " ", " b"}},
		{llama3Pattern, "a   b", []string{"a", "  ", " b"}},
		{llama3Pattern, "  hi", []string{" ", " hi"}},
		// At the end of the text the look-ahead succeeds on the whole run.
		{llama3Pattern, "a  ", []string{"a", "  "}},
		// A single space before a digit: the look-ahead alternative fails
		// and the final \s+ takes it.
		{llama3Pattern, "x  1", []string{"x", " ", " ", "1"}},
		{llama3Pattern, "a\n\nb", []string{"a", "\n\n", "b"}},
		// \s*[\r\n]+ backtracks to end at the last newline.
		{llama3Pattern, "a \n b", []string{"a", " \n", " b"}},
		{llama3Pattern, "hello\r\n", []string{"hello", "\r\n"}},
		{llama3Pattern, "x !!", []string{"x", " !!"}},
		{llama3Pattern, "a...b", []string{"a", "...", "b"}},
		// A punctuation character before letters joins them.
		{llama3Pattern, "a.b", []string{"a", ".b"}},
		{llama3Pattern, "Ünïcödé wörds", []string{"Ünïcödé", " wörds"}},
		// U+3000 is White_Space for Oniguruma's \s (Go's \s is ASCII only,
		// under which the run would be taken as punctuation).
		{llama3Pattern, "a\u3000\u3000b", []string{"a", "\u3000", "\u3000b"}},
		{llama3Pattern, "", nil},
		{qwen2Pattern, "x=123", []string{"x", "=", "1", "2", "3"}},
		{gpt2Pattern, "Hello world 123", []string{"Hello", " world", " 123"}},
		{gpt2Pattern, "I'm  ok?!", []string{"I", "'m", " ", " ok", "?!"}},
		{gpt2Pattern, "I'M", []string{"I", "'", "M"}}, // GPT-2's contractions are case-sensitive
	}
	for _, c := range cases {
		re, err := compileSplit(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if re.scan == nil {
			t.Fatalf("no scanner for %q", c.pattern)
		}
		// Both the hand-written scanner and the translated regex.
		for _, path := range []struct {
			name string
			s    *splitRegex
		}{{"scanner", re}, {"regex", regexOnly(re)}} {
			got := path.s.split(c.in, true)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s: split(%q) = %q, want %q", path.name, c.in, got, c.want)
			}
			if strings.Join(got, "") != c.in {
				t.Errorf("%s: split(%q) loses text: %q", path.name, c.in, got)
			}
		}
	}
}

// regexOnly returns a copy of s that splits with the translated regex.
func regexOnly(s *splitRegex) *splitRegex {
	c := *s
	c.scan = nil
	return &c
}

// TestScannersMatchRegex compares the scanners with the regex path on random
// text that stresses the alternatives' boundaries.
func TestScannersMatchRegex(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, p := range []string{llama3Pattern, qwen2Pattern, gpt2Pattern} {
		re, err := compileSplit(p)
		if err != nil {
			t.Fatal(err)
		}
		slow := regexOnly(re)
		for range 20000 {
			s := randomText(rng)
			if rng.IntN(10) == 0 { // invalid UTF-8 too
				s += string([]byte{0xff, 'a', 0xc3})
			}
			if got, want := re.split(s, true), slow.split(s, true); !reflect.DeepEqual(got, want) {
				t.Fatalf("pattern %q, text %q: scanner %q, regex %q", p, s, got, want)
			}
		}
	}
}

func TestSplitRemoved(t *testing.T) {
	re, err := compileSplit(`\s+`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := re.split(" a  bc\td ", false), []string{"a", "bc", "d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Removed split = %q, want %q", got, want)
	}
}

func TestTranslate(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{`\s+`, `[` + wsClass + `]+`, ""},
		{`[^\s\p{L}]`, `[^` + wsClass + `\p{L}]`, ""},
		{`\S\d\w`, `[^` + wsClass + `]\p{Nd}[` + wordClass + `]`, ""},
		{`^a$`, `(?m:^)a(?m:$)`, ""},
		{`[]a]`, `[\]a]`, ""},
		{`a\.b`, `a\.b`, ""},
		{`(?<name>x)`, `(?<name>x)`, ""},
		{`a(?=b)`, "", "look-around"},
		{`(?<=a)b`, "", "look-around"},
		{`(?>ab)`, "", "look-around"},
		{`a++`, "", "possessive"},
		{`[\S]`, "", "inside a character class"},
	}
	for _, c := range cases {
		got, err := translate(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("translate(%q) error = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("translate(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := compileSplit(`a|\s+(?!\S)|\s+(?!\S)`); err == nil {
		t.Error("a repeated look-ahead alternative should be refused")
	}
	if alts, err := topLevelAlternatives(`a|(b|c)|[|]|\|`); err != nil || !reflect.DeepEqual(alts, []string{"a", "(b|c)", "[|]", `\|`}) {
		t.Errorf("topLevelAlternatives = %q, %v", alts, err)
	}
}

func BenchmarkSplitLlama3(b *testing.B) {
	re, err := compileSplit(llama3Pattern)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var sb strings.Builder
	for sb.Len() < 64<<10 {
		sb.WriteString(randomText(rng))
		sb.WriteString(" The quick brown fox, 1234 jumps.\n")
	}
	text := sb.String()
	for _, path := range []struct {
		name string
		s    *splitRegex
	}{{"scanner", re}, {"regex", regexOnly(re)}} {
		b.Run(path.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				path.s.each(text, false, func(string) {})
			}
		})
	}
}

// split returns the pieces each produces, as a slice.
func (s *splitRegex) split(text string, keepMatches bool) []string {
	var out []string
	s.each(text, !keepMatches, func(p string) { out = append(out, p) })
	return out
}
