package rollout

import (
	"slices"
	"strings"
	"testing"
)

func sampleRollout() *Rollout {
	return &Rollout{
		Tokens:    [][]int32{{1, 2, 3}, {4, 5}, {6, 7, 8, 9}},
		PromptLen: []int{1, 1, 2},
		Mask:      [][]float32{{0, 1, 1}, {0, 1}, {0, 0, 1, 1}},
		Reward:    []float64{1, 0, 0.5},
		GroupID:   []string{"a", "b", "a"},
		TaskID:    []string{"t1", "t2", "t1"},
		Role:      []string{"p", "p", "p"},
		Traj:      []int{0, 1, 2},
		Tok:       map[string][][]float32{KeyLogProbs: {{0, -1, -2}, {0, -3}, {0, 0, -4, -5}}},
		Row:       map[string][]float64{KeyChosen: {1, 0, 0}},
	}
}

func TestRolloutValidate(t *testing.T) {
	if err := sampleRollout().Validate(); err != nil {
		t.Fatalf("valid rollout: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(r *Rollout)
		want   string
	}{
		{"short reward", func(r *Rollout) { r.Reward = r.Reward[:2] }, `"reward" has 2 rows`},
		{"token column row", func(r *Rollout) { r.Tok[KeyLogProbs][1] = []float32{0} }, `"log_probs" row 1 has 1 tokens, want 2`},
		{"mask row", func(r *Rollout) { r.Mask[2] = r.Mask[2][:3] }, `"mask" row 2`},
		{"row column", func(r *Rollout) { r.Row[KeyChosen] = nil }, `"chosen" has 0 rows`},
		{"prompt too long", func(r *Rollout) { r.PromptLen[1] = 5 }, `"prompt_len" row 1`},
		{"group ids", func(r *Rollout) { r.GroupID = append(r.GroupID, "x") }, `"group_id" has 4 rows`},
		{"traj", func(r *Rollout) { r.Traj = []int{0} }, `"traj" has 1 rows`},
	}
	for _, c := range cases {
		r := sampleRollout()
		c.mutate(r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestRolloutSetColumns(t *testing.T) {
	r := sampleRollout()
	if err := r.SetTok(KeyAdvantages, [][]float32{{0, 1, 1}, {0, 2}}); err == nil {
		t.Error("SetTok with a missing row: no error")
	}
	if err := r.SetTok(KeyAdvantages, [][]float32{{0, 1, 1}, {0, 2}, {0, 0, 3, 3}}); err != nil {
		t.Error(err)
	}
	if err := r.SetRow(KeyLabel, []float64{1, 0}); err == nil {
		t.Error("SetRow with a missing row: no error")
	}
	if err := r.SetRow(KeyLabel, []float64{1, 0, 1}); err != nil {
		t.Error(err)
	}
	if err := r.Validate(); err != nil {
		t.Error(err)
	}
	empty := &Rollout{Tokens: [][]int32{{1}}}
	if err := empty.SetRow(KeyIsCorrect, []float64{1}); err != nil || empty.Row[KeyIsCorrect][0] != 1 {
		t.Errorf("SetRow on a rollout without Row map: %v", err)
	}
}

func TestRolloutSelectDoesNotAlias(t *testing.T) {
	r := sampleRollout()
	s, err := r.Select([]int{2, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Reward, []float64{0.5, 1, 0.5}) || !slices.Equal(s.GroupID, []string{"a", "a", "a"}) || s.DataSource != nil {
		t.Errorf("selected columns: reward %v group %v source %v", s.Reward, s.GroupID, s.DataSource)
	}
	s.Tokens[0][0] = 100
	s.Mask[0][0] = 7
	s.Tok[KeyLogProbs][0][0] = 7
	s.Row[KeyChosen][1] = 7
	if r.Tokens[2][0] != 6 || r.Mask[2][0] != 0 || r.Tok[KeyLogProbs][2][0] != 0 || r.Row[KeyChosen][0] != 1 {
		t.Error("mutating the selection changed the original")
	}
	if s.Tokens[2][0] != 6 {
		t.Error("two selections of the same row alias each other")
	}
	if _, err := r.Select([]int{3}); err == nil {
		t.Error("out-of-range row: no error")
	}
}

func TestRolloutShuffleIsDeterministic(t *testing.T) {
	r := &Rollout{}
	for i := range 50 {
		r.Tokens = append(r.Tokens, []int32{int32(i)})
		r.Reward = append(r.Reward, float64(i))
	}
	a, b, c := r.Shuffle(7), r.Shuffle(7), r.Shuffle(8)
	if !slices.Equal(a.Reward, b.Reward) {
		t.Error("same seed, different order")
	}
	if slices.Equal(a.Reward, c.Reward) {
		t.Error("different seeds, same order")
	}
	if slices.Equal(a.Reward, r.Reward) {
		t.Error("shuffle left 50 rows in order")
	}
	sorted := slices.Clone(a.Reward)
	slices.Sort(sorted)
	if !slices.Equal(sorted, r.Reward) {
		t.Error("shuffle is not a permutation")
	}
	for i := range a.Tokens {
		if float64(a.Tokens[i][0]) != a.Reward[i] {
			t.Fatal("columns shuffled differently")
		}
	}
}

func TestRolloutGroups(t *testing.T) {
	r := sampleRollout()
	if got := r.Groups(); len(got) != 2 || !slices.Equal(got[0], []int{0, 2}) || !slices.Equal(got[1], []int{1}) {
		t.Errorf("groups %v", got)
	}
	r.GroupID = nil
	if got := r.Groups(); len(got) != 3 {
		t.Errorf("groups without ids %v", got)
	}
}

func TestConcat(t *testing.T) {
	a, b := sampleRollout(), sampleRollout()
	c, err := Concat(a, &Rollout{}, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 6 || !slices.Equal(c.Traj, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("len %d traj %v", c.Len(), c.Traj)
	}
	if !slices.Equal(c.Row[KeyChosen], []float64{1, 0, 0, 1, 0, 0}) || len(c.Tok[KeyLogProbs]) != 6 {
		t.Errorf("columns %v", c.Row)
	}
	c.Tokens[0][0] = 50
	if a.Tokens[0][0] != 1 {
		t.Error("concat aliases its parts")
	}
	b.Tok[KeyValues] = [][]float32{{0, 0, 0}, {0, 0}, {0, 0, 0, 0}}
	if _, err := Concat(a, b); err == nil || !strings.Contains(err.Error(), `"values"`) {
		t.Errorf("mismatched columns: err = %v", err)
	}
	b = sampleRollout()
	b.Reward = nil
	if _, err := Concat(a, b); err == nil || !strings.Contains(err.Error(), `"reward"`) {
		t.Errorf("mismatched fixed columns: err = %v", err)
	}
	b = sampleRollout()
	b.Reward = b.Reward[:1]
	if _, err := Concat(a, b); err == nil {
		t.Error("invalid part: no error")
	}
	if e, err := Concat(); err != nil || e.Len() != 0 {
		t.Errorf("empty concat: %v %v", e, err)
	}
}
