package runtime

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"stx.dev/stx/runtime/tokenizer"
)

func TestScoreJSONL(t *testing.T) {
	b := testBackend(t)
	m, err := OpenModel("tiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewScorer(b, m)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ModelTokenizer(m, "")
	if err != nil {
		t.Fatal(err)
	}
	input := `{"tokens": [257, 104, 105, 258]}

{"text": "hi"}
{"tokens": [65]}
`
	var out bytes.Buffer
	sum, err := ScoreJSONL(strings.NewReader(input), &out, sc, tok, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || sum.Records != 3 || sum.Tokens != 3+2+0 {
		t.Fatalf("summary %+v, %d lines:\n%s", sum, len(lines), out.String())
	}
	var recs []ScoreRecord
	for _, l := range lines {
		var r ScoreRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	// "hi" with BOS is [257 104 105]: its log-probs are the first two of record 0.
	if got := recs[1].Tokens; len(got) != 3 || got[0] != tokenizer.ByteBOS || got[1] != 'h' {
		t.Fatalf("text record tokens %v", got)
	}
	for j := range 2 {
		if math.Abs(float64(recs[1].LogProbs[j]-recs[0].LogProbs[j])) > 1e-6 {
			t.Errorf("token %d: %v vs %v for the same prefix", j, recs[1].LogProbs[j], recs[0].LogProbs[j])
		}
	}
	total := 0.0
	for _, r := range recs {
		for _, lp := range r.LogProbs {
			total -= float64(lp)
		}
	}
	if want := total / 5; math.Abs(sum.MeanNLL-want) > 1e-9 || math.Abs(sum.Perplexity-math.Exp(want)) > 1e-9 {
		t.Errorf("summary %+v, want mean NLL %v", sum, want)
	}
	// A near-uniform init gives NLL ≈ log(259).
	if math.Abs(sum.MeanNLL-math.Log(259)) > 0.5 {
		t.Errorf("mean NLL %v far from log(259) = %v", sum.MeanNLL, math.Log(259))
	}
	for _, bad := range []string{`{"tokens": [1, 9999]}`, `{"text": 3}`, `{}`, `not json`, `{"tokens": []}`, "{\"text\": \"a\xffb\"}"} {
		if _, err := ScoreJSONL(strings.NewReader(bad+"\n"), &bytes.Buffer{}, sc, tok, nil, 2); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: error %v, want one naming line 1", bad, err)
		}
	}
}
