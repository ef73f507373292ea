package tasks

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"stx.dev/stx/internal/pyref"

	"stx.dev/stx/schema"
)

// The math reward against Hugging Face's Math-Verify. testdata/mathverify/
// cases.jsonl holds graded cases, one JSON object a line:
//
//	{"id": "gsm8k-003", "gold": "72", "completion": "#### The answer is 72", "label": 1}
//
// gold is a dataset's reference answer (a GSM8K solution, "#### 72", a
// number, $…$ or \boxed{…}), completion a model's solution, and label
// Math-Verify's verdict, int(verify(parse(gold), parse(completion))), as
// scripts/mathverify-labels.py computes it. Regenerate the labels after
// editing the cases with
//
//	scripts/fetch-mathverify.sh && scripts/mathverify-labels.py --write engine/tasks/testdata/mathverify/cases.jsonl
//
// The cases are written in forms Math-Verify parses as intended (it reads
// a bare LaTeX reference such as 2\sqrt{3} as 2): stx accepts more forms
// (bare LaTeX references, words after a boxed number), which the table
// cannot grade and math_test.go covers.

const mathVerifyCases = "testdata/mathverify/cases.jsonl"

type mathVerifyCase struct {
	ID         string `json:"id"`
	Gold       string `json:"gold"`
	Completion string `json:"completion"`
	Label      int    `json:"label"`
}

func loadMathVerifyCases(t *testing.T) []mathVerifyCase {
	t.Helper()
	data, err := os.ReadFile(mathVerifyCases)
	if err != nil {
		t.Fatal(err)
	}
	var cases []mathVerifyCase
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var c mathVerifyCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s:%d: %v", mathVerifyCases, n, err)
		}
		if c.ID == "" || seen[c.ID] || c.Label != 0 && c.Label != 1 {
			t.Fatalf("%s:%d: case %q: want a unique id and a label 0 or 1, got %d", mathVerifyCases, n, c.ID, c.Label)
		}
		seen[c.ID] = true
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestMathVerifyAgreement grades the table with the math reward (default
// tolerance): it must agree with Math-Verify on 99% of the cases at least,
// and never score 1 where Math-Verify scores 0 (a wrong answer rewarded).
func TestMathVerifyAgreement(t *testing.T) {
	cases := loadMathVerifyCases(t)
	if len(cases) < 300 {
		t.Fatalf("%d cases, want at least 300", len(cases))
	}
	f, err := NewRewardFunc(schema.Reward{Fn: "math", Tolerance: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	agree, correct, wrongScored := 0, 0, 0
	for _, c := range cases {
		got := int(f(c.Completion, Example{Answer: c.Gold}))
		correct += c.Label
		if got == c.Label {
			agree++
			continue
		}
		pred, _ := ExtractAnswer(c.Completion)
		msg := "Math-Verify says %d, stx %d: gold %q, completion %q (stx reads %q against %q)"
		if got == 1 {
			wrongScored++
			t.Errorf("%s: wrong answer scored 1: "+msg, c.ID, c.Label, got, c.Gold, c.Completion, pred, referenceAnswer(c.Gold))
		} else {
			t.Logf("%s: "+msg, c.ID, c.Label, got, c.Gold, c.Completion, pred, referenceAnswer(c.Gold))
		}
	}
	t.Logf("stx agrees with Math-Verify on %d of %d cases (%.1f%%); %d correct, %d wrong; %d wrong answers scored 1",
		agree, len(cases), 100*float64(agree)/float64(len(cases)), correct, len(cases)-correct, wrongScored)
	if 100*agree < 99*len(cases) {
		t.Errorf("agreement %d/%d is under 99%%", agree, len(cases))
	}
	if frac := float64(correct) / float64(len(cases)); frac < 0.35 || frac > 0.65 {
		t.Errorf("%.0f%% of the cases are correct answers; keep the table near half and half", 100*frac)
	}
}

// TestMathVerifyLabels keeps the table honest: Math-Verify itself, run
// over the cases by scripts/mathverify-labels.py, must give the committed
// labels. It skips when Math-Verify is not installed
// (scripts/fetch-mathverify.sh), except under CI=true, where that fails.
// A passing run leaves a stamp in Math-Verify's directory named by the
// hash of the cases, the script and the installed pins, so that the
// repeated test passes of `make test` run Python once; any edit reruns it.
func TestMathVerifyLabels(t *testing.T) {
	t.Parallel()
	ref := pyref.Require(t, "mathverify", os.Getenv("STX_MATHVERIFY_DIR"), "math_verify", "fetch-mathverify.sh")
	dir := ref.Dir
	cases := loadMathVerifyCases(t)
	casesPath, err := filepath.Abs(mathVerifyCases)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join("..", "..", "scripts", "mathverify-labels.py")
	h := sha256.New()
	for _, f := range []string{casesPath, script, filepath.Join(dir, ".stx-pins")} {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	stamp := filepath.Join(dir, ".stx-verified", hex.EncodeToString(h.Sum(nil)))
	if _, err := os.Stat(stamp); err == nil {
		t.Logf("Math-Verify already gave these labels (%s)", stamp)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ref.Python, script, casesPath)
	cmd.Env = append(os.Environ(), "STX_MATHVERIFY_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mathverify-labels.py: %v\n%s", err, stderr.Bytes())
	}
	t.Logf("Math-Verify labelled %d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
	labels := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l struct {
			ID    string `json:"id"`
			Label int    `json:"label"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("mathverify-labels.py printed %q: %v", sc.Text(), err)
		}
		labels[l.ID] = l.Label
	}
	if len(labels) != len(cases) {
		t.Fatalf("Math-Verify labelled %d cases of %d", len(labels), len(cases))
	}
	for _, c := range cases {
		if got, ok := labels[c.ID]; !ok || got != c.Label {
			t.Errorf("%s: committed label %d, Math-Verify says %d (gold %q, completion %q); rerun mathverify-labels.py --write",
				c.ID, c.Label, got, c.Gold, c.Completion)
		}
	}
	if !t.Failed() {
		if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err == nil {
			os.WriteFile(stamp, nil, 0o644)
		}
	}
}
