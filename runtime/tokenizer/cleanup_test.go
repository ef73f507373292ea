package tokenizer

import (
	"strings"
	"testing"
)

// TestCleanUpTokenization checks transformers' clean_up_tokenization: each
// replacement through the whole text, in order (expected values from
// transformers' implementation).
func TestCleanUpTokenization(t *testing.T) {
	for _, c := range [][2]string{
		{"Hello , world . How are you ? Fine !", "Hello, world. How are you? Fine!"},
		{"I do n't know , I 'm sure it 's fine and we 've seen they 're here", "I don't know, I'm sure it's fine and we've seen they're here"},
		{"a ' b ' c", "a'b'c"},
		{"a  .  b", "a .  b"},
		{" ... ?! ,, .", "...?!,,."},
		{"it ' s", "it's"},
		{"x 'm 's 've 're n't", "x'm's've'ren't"},
		{"plain text", "plain text"},
		{"", ""},
		{"end .", "end."},
		{" 's", "'s"},
		{"a ' ' b", "a'' b"},
		{"don 't", "don 't"},
		{"tab\t.", "tab\t."},
		{"é . ü", "é. ü"},
	} {
		if got := CleanUpTokenization(c[0]); got != c[1] {
			t.Errorf("CleanUpTokenization(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}

// TestCleanUpSpacesConfig: Decode cleans up only where tokenizer_config.json
// sets clean_up_tokenization_spaces; a value that is not a boolean is an error.
func TestCleanUpSpacesConfig(t *testing.T) {
	for _, c := range []struct{ config, want, err string }{
		{`{"clean_up_tokenization_spaces": true}`, "Hi, you.", ""},
		{`{"clean_up_tokenization_spaces": false}`, "Hi , you .", ""},
		{`{}`, "Hi , you .", ""},
		{`{"clean_up_tokenization_spaces": "yes"}`, "", "not a boolean"},
	} {
		tok, err := Load(writeTiny(t, false, c.config))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one containing %q", c.config, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Encode("Hi , you .")
		if got := tok.Decode(ids); got != c.want {
			t.Errorf("%s: Decode = %q, want %q", c.config, got, c.want)
		}
		if got := tok.DecodeSpecial(ids); got != c.want {
			t.Errorf("%s: DecodeSpecial = %q, want %q", c.config, got, c.want)
		}
	}
}
