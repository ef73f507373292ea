package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"stx.dev/stx/runtime"
)

// fixture is one request and the response SGLang's or vLLM's documentation gives for it
// (testdata/serve/*.json). Values that vary (ids, timings, sampled tokens and log-probs) are
// placeholders in the expected response; everything else must be equal, field by field, with
// no field missing and none extra.
type fixture struct {
	Doc          string          `json:"doc"`
	Method       string          `json:"method"`
	Path         string          `json:"path"`
	Request      json.RawMessage `json:"request"`
	RawRequest   *string         `json:"raw_request"`
	Status       int             `json:"status"`
	Response     json.RawMessage `json:"response"`
	ResponseText *string         `json:"response_text"`
}

// TestFixtures sends every fixture's request to a server on the tiny model and checks the
// response against it.
func TestFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "serve", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("found %d fixtures, want at least 30", len(files))
	}
	_, ts := tinyServer(t, nil)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) { runFixture(t, ts.URL, f) })
	}
}

// TestSleepFixtures runs the fixtures of testdata/serve/sleep/ in the order of their names,
// on one server whose state they change: vLLM's sleep mode and SGLang's memory release.
func TestSleepFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "serve", "sleep", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d fixtures, want at least 10", len(files))
	}
	_, ts := tinyServer(t, func(o *Options) {
		o.Reload = func() (*runtime.Model, error) { return runtime.OpenModel("tiny", 1) }
	})
	for _, f := range files {
		if !t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) { runFixture(t, ts.URL, f) }) {
			return // the later fixtures expect this one's state
		}
	}
}

// runFixture sends the request of fixture file f to the server at base and checks the
// response against it.
func runFixture(t *testing.T, base, f string) {
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fx); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	body := []byte(fx.Request)
	if fx.RawRequest != nil {
		body = []byte(*fx.RawRequest)
	}
	status, got := do(t, base, fx.Method, fx.Path, body)
	if status != fx.Status {
		t.Fatalf("%s %s: status %d, want %d; body %s", fx.Method, fx.Path, status, fx.Status, got)
	}
	if fx.ResponseText != nil {
		if string(got) != *fx.ResponseText {
			t.Fatalf("body %q, want %q", got, *fx.ResponseText)
		}
		return
	}
	var want, have any
	if err := json.Unmarshal(fx.Response, &want); err != nil {
		t.Fatalf("%s: response: %v", f, err)
	}
	if err := json.Unmarshal(got, &have); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, got)
	}
	for _, e := range match("", want, have) {
		t.Error(e)
	}
}

// do sends a JSON request and returns the status and body.
func do(t testing.TB, base, method, path string, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, got
}

var tokenIDString = regexp.MustCompile(`^token_id:\d+$`)

// match compares a response with its expectation, returning one line per difference. In want,
// strings "<...>" are placeholders: <string>, <id> (non-empty string), <int>, <number>,
// <logprob> (a number ≤ 0), <token> (an id of the tiny model's vocabulary), <object>,
// <token-id-string> ("token_id:ID"). A list [{"<each>": X, "<len>": N}] is a list of N
// (any number without <len>) values matching X.
func match(path string, want, have any) []string {
	where := path
	if where == "" {
		where = "(top)"
	}
	bad := func(format string, args ...any) []string {
		return []string{where + ": " + fmt.Sprintf(format, args...)}
	}
	if s, ok := want.(string); ok && strings.HasPrefix(s, "<") && strings.HasSuffix(s, ">") {
		num, isNum := have.(float64)
		str, isStr := have.(string)
		ok := false
		switch s {
		case "<string>":
			ok = isStr
		case "<id>":
			ok = isStr && str != ""
		case "<int>":
			ok = isNum && num == float64(int64(num))
		case "<number>":
			ok = isNum
		case "<logprob>":
			ok = isNum && num <= 0
		case "<token>":
			ok = isNum && num == float64(int64(num)) && num >= 0 && num < 259
		case "<object>":
			_, ok = have.(map[string]any)
		case "<token-id-string>":
			ok = isStr && tokenIDString.MatchString(str)
		default:
			return bad("unknown placeholder %s", s)
		}
		if !ok {
			return bad("%v does not match %s", have, s)
		}
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return bad("got %v, want an object", have)
		}
		var errs []string
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			hv, ok := h[k]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: missing", where, k))
				continue
			}
			errs = append(errs, match(path+"."+k, w[k], hv)...)
		}
		for k := range h {
			if _, ok := w[k]; !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: unexpected field", where, k))
			}
		}
		return errs
	case []any:
		h, ok := have.([]any)
		if !ok {
			return bad("got %v, want a list", have)
		}
		if len(w) == 1 {
			if spec, ok := w[0].(map[string]any); ok {
				if elem, ok := spec["<each>"]; ok {
					if n, ok := spec["<len>"].(float64); ok && len(h) != int(n) {
						return bad("%d elements, want %d", len(h), int(n))
					}
					var errs []string
					for i, v := range h {
						errs = append(errs, match(fmt.Sprintf("%s[%d]", path, i), elem, v)...)
					}
					return errs
				}
			}
		}
		if len(h) != len(w) {
			return bad("%d elements, want %d", len(h), len(w))
		}
		var errs []string
		for i := range w {
			errs = append(errs, match(fmt.Sprintf("%s[%d]", path, i), w[i], h[i])...)
		}
		return errs
	}
	if fmt.Sprint(want) != fmt.Sprint(have) || (want == nil) != (have == nil) {
		return bad("got %v, want %v", have, want)
	}
	return nil
}

// TestMatchFails checks that the matcher reports what it should: a test of the fixture test.
func TestMatchFails(t *testing.T) {
	for _, c := range []struct {
		name       string
		want, have string
	}{
		{"missing field", `{"a": 1, "b": 2}`, `{"a": 1}`},
		{"extra field", `{"a": 1}`, `{"a": 1, "b": 2}`},
		{"value", `{"a": "x"}`, `{"a": "y"}`},
		{"null", `{"a": null}`, `{"a": 0}`},
		{"length", `[{"<each>": "<int>", "<len>": 2}]`, `[1]`},
		{"element", `[{"<each>": "<logprob>"}]`, `[-1, 0.5]`},
		{"token", `"<token>"`, `259`},
		{"type", `"<string>"`, `3`},
		{"token id string", `"<token-id-string>"`, `"17"`},
	} {
		var want, have any
		if err := json.Unmarshal([]byte(c.want), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(c.have), &have); err != nil {
			t.Fatal(err)
		}
		if errs := match("", want, have); len(errs) == 0 {
			t.Errorf("%s: %s matched %s", c.name, c.have, c.want)
		}
	}
}
