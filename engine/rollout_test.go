package engine

import (
	"fmt"
	"slices"
	"testing"

	"stx.dev/stx/engine/tasks"
	"stx.dev/stx/rollout"
	"stx.dev/stx/runtime/tokenizer"
)

func TestFeederEpochs(t *testing.T) {
	var train []tasks.Example
	for i := range 7 {
		train = append(train, tasks.Example{ID: fmt.Sprint(i)})
	}
	f := &feeder{train: train, seed: 5}
	got := f.next(14)
	for e := range 2 {
		var ids []string
		for _, ex := range got[e*7 : e*7+7] {
			ids = append(ids, ex.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"0", "1", "2", "3", "4", "5", "6"}) {
			t.Errorf("epoch %d does not see every example once: %v", e, ids)
		}
	}
	// The cursor alone restores the order (what a checkpoint keeps).
	g := &feeder{train: train, seed: 5, Cursor: 9}
	if a, b := g.next(3), got[9:12]; !slices.EqualFunc(a, b, func(x, y tasks.Example) bool { return x.ID == y.ID }) {
		t.Errorf("resumed order %v, want %v", a, b)
	}
	if f.epoch() != 2 {
		t.Errorf("epoch %g, want 2", f.epoch())
	}
}

func TestEncoder(t *testing.T) {
	tok := tokenizer.NewByte()
	for _, tc := range []struct {
		max  int
		text string
		want []int32
	}{
		{0, "ab", []int32{tokenizer.ByteBOS, 'a', 'b'}},
		{3, "abcd", []int32{tokenizer.ByteBOS, 'c', 'd'}}, // keeps the end of a long prompt
		{10, "ab", []int32{tokenizer.ByteBOS, 'a', 'b'}},
	} {
		if got := (encoder{tok: tok, maxPrompt: tc.max}).prompt(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("prompt(%q, max %d) = %v, want %v", tc.text, tc.max, got, tc.want)
		}
	}
	if got := (encoder{tok: tok}).completion("7"); !slices.Equal(got, []int32{'7', tokenizer.ByteEOS}) {
		t.Errorf("completion = %v", got)
	}
}

func TestReshuffleKeepsUnits(t *testing.T) {
	d := &rollout.Rollout{}
	for i := range 10 {
		d.Tokens = append(d.Tokens, []int32{int32(i)})
	}
	l := &loop{unit: 2}
	a, err := l.reshuffle(d, 42)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.reshuffle(d, 42)
	moved := false
	for i := 0; i < 10; i += 2 {
		x, y := a.Tokens[i][0], a.Tokens[i+1][0]
		if x%2 != 0 || y != x+1 {
			t.Fatalf("pair split: rows %d, %d hold %d, %d", i, i+1, x, y)
		}
		moved = moved || x != int32(i)
		if b.Tokens[i][0] != x {
			t.Fatalf("same seed, different order")
		}
	}
	if !moved {
		t.Error("reshuffle left the order unchanged")
	}
}

// TestEncoderPromptBOS: a plain prompt gets the tokenizer's BOS in front,
// also when cut to max_prompt_tokens; a prompt a chat template rendered gets
// none (the template writes its own special tokens), and is cut the same way.
func TestEncoderPromptBOS(t *testing.T) {
	tok := &tokenizer.Byte{}
	bos := tok.BOS()
	for _, tc := range []struct {
		text      string
		maxPrompt int
		templated bool
		want      []int32
	}{
		{"ab", 0, false, []int32{bos, 'a', 'b'}},
		{"abc", 3, false, []int32{bos, 'b', 'c'}},
		{"abc", 4, false, []int32{bos, 'a', 'b', 'c'}},
		{"ab", 0, true, []int32{'a', 'b'}},
		{"abcd", 3, true, []int32{'b', 'c', 'd'}},
	} {
		e := encoder{tok: tok, maxPrompt: tc.maxPrompt, templated: tc.templated}
		if got := e.prompt(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("prompt(%q, max %d, templated %v) = %v, want %v", tc.text, tc.maxPrompt, tc.templated, got, tc.want)
		}
	}
}
