package chat

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRenderLimits: a template is data from a model download; every way of
// making a render run for ever, exhaust memory or overflow the stack fails
// fast with an error that names the limit (a Go stack overflow or an
// out-of-memory is fatal, not recoverable).
func TestRenderLimits(t *testing.T) {
	doubled := func(op string) string {
		return "{% set ns = namespace(v=" + map[string]string{"~": "'x'", "+": "'x'", "list": "[1]", "nest": "[1]"}[op] + ") %}" +
			"{% for i in range(64) %}{% set ns.v = " + map[string]string{
			"~": "ns.v ~ ns.v", "+": "ns.v + ns.v", "list": "ns.v + ns.v", "nest": "[ns.v, ns.v]",
		}[op] + " %}{% endfor %}{{ ns.v|length }}"
	}
	cases := []struct{ name, src, want string }{
		{"recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "more than 256 calls (Limits.MaxCallDepth)"},
		{"mutual recursion", "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(0) }}", "Limits.MaxCallDepth"},
		{"caller recursion", "{% macro f() %}{% call f() %}{{ caller() }}{% endcall %}{% endmacro %}{% call f() %}x{% endcall %}", "Limits.MaxCallDepth"},
		{"recursive loop", "{% set t = [1] %}{% for x in t recursive %}{{ loop(t) }}{% endfor %}", "Limits.MaxCallDepth"},
		{"huge range", "{{ range(100000000000)|length }}", "MAX_RANGE (100000)"},
		{"huge repeat", "{{ 'x' * 100000000000 }}", "Limits.MaxStringBytes"},
		{"huge list repeat", "{{ ([1] * 100000000000)|length }}", "Limits.MaxItems"},
		{"string doubling ~", doubled("~"), "Limits.MaxStringBytes"},
		{"string doubling +", doubled("+"), "Limits.MaxStringBytes"},
		{"list doubling", doubled("list"), "Limits.MaxItems"},
		{"nested ranges", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "Limits.MaxIterations"},
		{"nested filters", "{% for i in range(100000) %}{{ range(100000)|select|list|length }}{% endfor %}", "Limits.MaxIterations"},
		{"output", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "Limits.MaxStringBytes"},
		{"total bytes", "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{% set t = s ~ 'y' %}{% endfor %}", "Limits.MaxTotalBytes"},
		{"shared repr", "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v }}", "Limits."},
		{"shared tojson", "{% set ns = namespace(v=[1]) %}{% for i in range(60) %}{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v|tojson }}", "Limits."},
		{"shared equality", "{% set ns = namespace(v=[1], w=[1]) %}{% for i in range(60) %}{% set ns.v = [ns.v, ns.v] %}{% set ns.w = [ns.w, ns.w] %}{% endfor %}{{ ns.v == ns.w }}", "Limits.MaxIterations"},
		{"deep value", "{% set ns = namespace(v=1) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}", "maximum recursion depth"},
		{"deep json", "{% set ns = namespace(v=1) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v|tojson }}", "maximum recursion depth"},
		{"center", "{{ 'x'.center(10000000000) }}", "Limits.MaxStringBytes"},
		{"indent", "{{ [1]|tojson(indent=100000000) }}", "indent"},
		{"format width", "{{ '%100000000000d' % 1 }}", "Limits.MaxStringBytes"},
		{"format spec width", "{{ '{:100000000000}'.format(1) }}", "Limits.MaxStringBytes"},
		{"deep parentheses", "{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}", "nests more than 1000 levels"},
		{"deep blocks", strings.Repeat("{% if true %}", 100000) + strings.Repeat("{% endif %}", 100000), "nests more than 1000 levels"},
		{"deep not", "{{ " + strings.Repeat("not ", 100000) + "1 }}", "nests more than 1000 levels"},
		{"deep filters", "{{ 1" + strings.Repeat("|abs", 100000) + " }}", "nests more than"},
		{"deep sums", "{{ 1" + strings.Repeat(" + 1", 100000) + " }}", "nests more than"},
		{"deep attributes", "{{ x" + strings.Repeat(".a", 100000) + " }}", "nests more than"},
		{"deep unary", "{{ " + strings.Repeat("-", 100000) + "1 }}", "nests more than 1000 levels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			tmpl, err := Parse(c.src, nil)
			if err == nil {
				_, err = tmpl.Render([]Message{{"user", "hi"}}, true)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "engine failed") {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v", d)
			}
			t.Logf("%v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// TestLoadBounds: chat_template.jinja and tokenizer_config.json are read with
// a size bound, and a named pipe in their place is an error, not a read
// that blocks.
func TestLoadBounds(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, MaxTemplateBytes+1)
	for i := range big {
		big[i] = 'x'
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("oversized chat_template.jinja: %v", err)
	}
	for _, name := range []string{"tokenizer_config.json", "chat_template.jinja"} {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
			t.Skipf("no FIFOs here: %v", err)
		}
		done := make(chan error, 1)
		go func() { _, err := Load(dir); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "named pipe") {
				t.Errorf("%s as a FIFO: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s as a FIFO: Load blocks", name)
		}
		if !Has(dir) {
			t.Errorf("%s as a FIFO: Has says no template, so Load would not report it", name)
		}
	}
}
