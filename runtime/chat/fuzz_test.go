package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// fuzzLimits keep each fuzz input cheap: every rendering stops within about
// a hundred thousand steps and a few megabytes.
var fuzzLimits = jinja.Limits{
	MaxCallDepth:   64,
	MaxIterations:  100_000,
	MaxStringBytes: 1 << 20,
	MaxTotalBytes:  16 << 20,
	MaxItems:       10_000,
}

// FuzzRender feeds arbitrary templates and message text to Parse and
// RenderWith: every outcome is text or an error, never a panic (which
// RenderWith would report as "the template engine failed"), a hang or a
// fatal stack overflow. The seeds are the templates of the tests: the
// semantic cases of the Jinja2 reference test, the limit cases and the
// tool-calling templates of testdata/.
//
//	go test -run '^$' -fuzz '^FuzzRender$' -fuzztime 2000x ./runtime/chat
func FuzzRender(f *testing.F) {
	for _, c := range semanticCases {
		f.Add(c.src, "hi")
	}
	f.Add("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "x")
	f.Add("{% set ns = namespace(v='x') %}{% for i in range(64) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}", "x")
	f.Add("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "x")
	f.Add("{{ 'x' * 100000000000 }}{{ range(100000000000) }}", "x")
	f.Add("{% for m in messages %}{{ m.content|tojson(indent=2) }}{{ m.content.split()|join(', ') }}{% endfor %}", "a \"b\" c")
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.jinja"))
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src), "What's the weather in Paris?")
	}
	tools := []byte(`[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "string", "description": "x"}}, "required": ["a"]}}}]`)
	f.Fuzz(func(t *testing.T, src, content string) {
		if len(src) > 64<<10 || len(content) > 64<<10 {
			return
		}
		tmpl, err := Parse(src, map[string]string{"bos_token": "<s>", "eos_token": "</s>"})
		if err != nil {
			if strings.Contains(err.Error(), "engine failed") {
				t.Fatalf("Parse panicked: %v", err)
			}
			return
		}
		tmpl.limits = fuzzLimits
		msgs := []Message{{"system", content}, {"user", content}, {"assistant", content}}
		for _, vars := range []map[string]any{nil, {"tools": jsonRaw(tools), "enable_thinking": false}} {
			_, err := tmpl.RenderWith(msgs, true, vars)
			if err != nil && strings.Contains(err.Error(), "engine failed") {
				t.Fatalf("RenderWith panicked: %v", err)
			}
		}
	})
}

func jsonRaw(b []byte) json.RawMessage { return json.RawMessage(b) }
