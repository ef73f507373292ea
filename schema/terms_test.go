package schema

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestTermsJSON: dpo_loss_type reads a string or a list and writes one term back as a
// string, so an exported recipe reads as it was written.
func TestTermsJSON(t *testing.T) {
	for _, c := range []struct {
		in, out string
		want    Terms
	}{
		{`"ipo"`, `"ipo"`, Terms{"ipo"}},
		{`["sigmoid","sft"]`, `["sigmoid","sft"]`, Terms{"sigmoid", "sft"}},
		{`["hinge"]`, `"hinge"`, Terms{"hinge"}},
	} {
		var got Terms
		if err := json.Unmarshal([]byte(c.in), &got); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, %v; want %v", c.in, got, err, c.want)
		}
		if out, err := json.Marshal(got); err != nil || string(out) != c.out {
			t.Errorf("%s: writes %s, %v; want %s", c.in, out, err, c.out)
		}
	}
	var bad Terms
	if err := json.Unmarshal([]byte(`3`), &bad); err == nil {
		t.Errorf("a number decoded as terms: %v", bad)
	}
}
