package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"stx.dev/stx/internal/pyref"
)

// The reference test: every case is rendered by stx and by Python's Jinja2
// set up as transformers' apply_chat_template sets it up
// (scripts/render-chat.py, one process for the whole batch), and the two must
// give identical text, or both an error. The cases are the real templates
// scripts/fetch-tokenizers.sh fetches, the tool-calling templates of
// testdata/, the chat templates of the vendored engine's own test data, each
// over the conversations of testdata/conversations.json with and without a
// generation prompt, tools and enable_thinking; and the small templates of
// semanticCases, one Jinja2 behaviour each.
//
// Python's Jinja2 comes from scripts/fetch-jinja.sh (pinned, installed with
// pip --target into $STX_CACHE_DIR/pyref/jinja). Without it the test skips,
// except under CI=true, where it fails.

// refCase is one rendering, in render-chat.py's input form.
type refCase struct {
	name     string
	Template string                     `json:"template"`
	Messages json.RawMessage            `json:"messages"`
	Tools    json.RawMessage            `json:"tools,omitempty"`
	AddGen   bool                       `json:"add_generation_prompt"`
	Specials map[string]string          `json:"specials,omitempty"`
	Extra    map[string]json.RawMessage `json:"extra,omitempty"`
}

type refResult struct {
	Text  *string `json:"text"`
	Error *string `json:"error"`
}

// repoRoot is the module root (the directory holding go.mod).
func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// pythonRender renders the cases with Python's Jinja2, in one process.
func pythonRender(t *testing.T, cases []refCase) []refResult {
	t.Helper()
	ref := pyref.Require(t, "jinja", "", "jinja2/__init__.py", "fetch-jinja.sh")
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ref.Python, filepath.Join(repoRoot(t), "scripts", "render-chat.py"))
	cmd.Env = ref.Env()
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/render-chat.py: %v\n%s", err, stderr.String())
	}
	var results []refResult
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("scripts/render-chat.py: %v", err)
	}
	if len(results) != len(cases) {
		t.Fatalf("scripts/render-chat.py: %d results for %d cases", len(results), len(cases))
	}
	return results
}

// stxRender renders a case with stx.
func stxRender(c refCase) (string, error) {
	tmpl, err := Parse(c.Template, c.Specials)
	if err != nil {
		return "", err
	}
	vars := map[string]any{}
	if c.Tools != nil {
		vars["tools"] = c.Tools
	}
	for k, v := range c.Extra {
		vars[k] = v
	}
	return tmpl.RenderWith(c.Messages, c.AddGen, vars)
}

// namedTemplate is a chat template and the special tokens it renders with.
type namedTemplate struct {
	name, src string
	specials  map[string]string
}

var testSpecials = map[string]string{"bos_token": "<s>", "eos_token": "</s>"}

// referenceTemplates lists the templates of the reference test.
func referenceTemplates(t *testing.T) []namedTemplate {
	var out []namedTemplate
	// The real templates fetched for the tokenizer conformance tests.
	root := tokenizersDir()
	fetched := 0
	for _, name := range []string{"qwen3", "llama3_1", "gemma3", "llama2", "deepseek_v3", "gptoss", "gpt4o"} {
		dir := filepath.Join(root, name)
		if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
			continue
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "golden.json")); err == nil {
			var g struct {
				Template string `json:"chat_template"`
			}
			if json.Unmarshal(raw, &g) == nil && g.Template != "" {
				dir = withTemplate(t, dir, g.Template)
			}
		}
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, namedTemplate{"fetched/" + name, tmpl.Source, tmpl.specials})
		fetched++
	}
	if fetched == 0 && os.Getenv("CI") == "true" {
		t.Fatalf("no fetched tokenizers in %s: CI fetches them with scripts/fetch-tokenizers.sh", root)
	}
	// Templates written for this test, and those the vendored engine ships.
	for _, glob := range []string{
		filepath.Join("testdata", "*.jinja"),
		filepath.Join(repoRoot(t), "third_party", "ardanlabs-jinja", "testdata", "templates", "*.jinja"),
	} {
		paths, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(paths)
		for _, p := range paths {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, namedTemplate{filepath.Base(p), string(src), testSpecials})
		}
	}
	return out
}

// conversationCases crosses every template with every conversation and a
// set of options.
func conversationCases(t *testing.T) []refCase {
	var convs []struct {
		Name     string          `json:"name"`
		Messages json.RawMessage `json:"messages"`
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &convs); err != nil {
		t.Fatal(err)
	}
	tools, err := os.ReadFile(filepath.Join("testdata", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	type option struct {
		name   string
		addGen bool
		tools  bool
		extra  map[string]json.RawMessage
	}
	options := []option{
		{"gen", true, false, nil},
		{"nogen", false, false, nil},
		{"gen+tools", true, true, nil},
		{"gen+nothink", true, false, map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}},
		{"nogen+tools+think", false, true, map[string]json.RawMessage{"enable_thinking": json.RawMessage("true")}},
	}
	var cases []refCase
	for _, tmpl := range referenceTemplates(t) {
		for _, conv := range convs {
			for _, o := range options {
				c := refCase{
					name:     fmt.Sprintf("%s × %s × %s", tmpl.name, conv.Name, o.name),
					Template: tmpl.src, Messages: conv.Messages, AddGen: o.addGen,
					Specials: tmpl.specials, Extra: o.extra,
				}
				if o.tools {
					c.Tools = tools
				}
				cases = append(cases, c)
			}
		}
	}
	return cases
}

func TestJinja2Reference(t *testing.T) {
	cases := conversationCases(t)
	conversations := len(cases)
	for i, s := range semanticCases {
		vars := map[string]json.RawMessage{}
		if s.vars != "" {
			if err := json.Unmarshal([]byte(s.vars), &vars); err != nil {
				t.Fatalf("semantic case %d: vars: %v", i, err)
			}
		}
		cases = append(cases, refCase{
			name: fmt.Sprintf("semantic %d %q", i, s.src), Template: s.src,
			Messages: json.RawMessage(`[{"role": "user", "content": "hi"}]`),
			Specials: testSpecials, Extra: vars,
		})
	}
	// strftime_now reads the clock: such a case is rendered by stx before and after Python,
	// and Python's text, taken in between, must equal one of the two (a minute may turn).
	early := map[int]string{}
	for i, c := range cases {
		if strings.Contains(c.Template, "strftime_now") {
			early[i], _ = stxRender(c)
		}
	}
	want := pythonRender(t, cases)
	same, shown := 0, 0
	sameConv := 0
	for i, c := range cases {
		got, err := stxRender(c)
		w := want[i]
		if e, ok := early[i]; ok && err == nil && w.Text != nil && e == *w.Text {
			got = e
		}
		var bad string
		switch {
		case w.Error != nil && err == nil:
			bad = fmt.Sprintf("Jinja2 fails (%s), stx renders %q", *w.Error, got)
		case w.Error == nil && err != nil:
			bad = fmt.Sprintf("stx fails (%v), Jinja2 renders %q", err, *w.Text)
		case w.Error == nil && got != *w.Text:
			bad = diffAt(got, *w.Text)
		}
		if bad == "" {
			same++
			if i < conversations {
				sameConv++
			}
			continue
		}
		if shown < 40 {
			t.Errorf("%s: %s", c.name, bad)
		}
		shown++
	}
	t.Logf("%d of %d renderings identical to Jinja2's (conversations: %d of %d; semantic cases: %d of %d)",
		same, len(cases), sameConv, conversations, same-sameConv, len(cases)-conversations)
	if shown > 40 {
		t.Errorf("... and %d more differences", shown-40)
	}
}

// diffAt shows where two renderings first differ, with some context.
func diffAt(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-80)
	clip := func(s string) string { return s[min(from, len(s)):min(i+80, len(s))] }
	return fmt.Sprintf("first difference at byte %d of %d/%d:\n stx    …%q…\n Jinja2 …%q…", i, len(got), len(want), clip(got), clip(want))
}

// semanticCase is a small template checking one Jinja2 behaviour; vars is a
// JSON object of variables (messages is one user turn).
type semanticCase struct{ src, vars string }

// semanticCases: the repros of issue #34 first, then one behaviour each.
var semanticCases = []semanticCase{
	// tojson keeps key order; indent; the two-variable loop's filter;
	// string escapes; errors where Jinja2 raises; Markup.
	{`{{ x | tojson(indent=2) }}`, `{"x": {"z": 1, "b": [1, 2], "a": {"y": 2, "c": 3}}}`},
	{`{% for k, v in x.items() if k != 'b' %}{{k}}={{v}};{% endfor %}`, `{"x": {"a": 1, "b": 2, "c": 3}}`},
	{`{{ 'a\rb'|length }}|{{ '\u00e9\x41\101\N' }}|{{ "\t\\\'\"" }}`, ``},
	{`{% for t in tools %}{{ t }}{% endfor %}`, ``},
	{`{{ '// ' + undefined_thing }}`, ``},
	{`{{ 'a' + {} }}`, ``},
	{`{{ none[0]['text'] }}`, ``},
	{`{{ [][0]['role'] }}`, ``},
	{`{{ ('<a>'|safe + '<b>') }}|{{ '<b>' + ('<a>'|safe) }}|{{ ('<a>'|safe).strip() + '&' }}`, ``},
}

func init() {
	semanticCases = append(semanticCases, moreSemanticCases...)
}

// moreSemanticCases: one behaviour of Jinja2 each, errors included.
var moreSemanticCases = []semanticCase{
	// whitespace: trim_blocks, lstrip_blocks, "-" and "+", comments, raw, newlines
	{"a\n  {% if true %}\n  b\n  {% endif %}\nc\n", ``},
	{"a  {% if true %}b{% endif %}  c", ``},
	{"{{ 'x' }}   {% if true %}y{% endif %}", ``},
	{"  {%+ if true %}x{% endif +%}\n\ny", ``},
	{"a {{- ' b ' -}} c\n\n {#- note -#}  d", ``},
	{"line1\n   {# comment #}\nline2\r\nline3\rline4\n\n", ``},
	{"{% raw %}\n  {{ not parsed }} {% if %}\n{% endraw %}\nafter", ``},
	{"  {%- raw -%}  x  {%- endraw -%}  y", ``},
	{"{% for i in [1, 2] %}\n    {{ i }}\n{% endfor %}\n", ``},
	{"{% for i in [1, 2] -%}\n    {{ i }}\n{%- endfor %}", ``},
	{"\t\t{% set x = 1 %}\t{{ x }}\n", ``},
	{"{{ '{{' }} {{ '}}' }} {{ {'a': {'b': 1}} }}", ``},
	// scoping
	{"{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = x + i %}{{ x }};{% endfor %}{{ x }}", ``},
	{"{% set ns = namespace(x=0, y='a') %}{% for i in [1,2,3] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}{{ ns.y }}{{ ns }}", ``},
	{"{% set x = 1 %}{% macro f() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ f() }}", ``},
	{"{% macro f() %}{{ x }}{% endmacro %}{% for x in [5] %}{{ f() }}{% endfor %}", ``},
	{"{% if true %}{% set y = 3 %}{% endif %}{{ y }}", ``},
	{"{% for i in [1] %}{% set z = 1 %}{% endfor %}{{ z is defined }}", ``},
	{"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}", ``},
	{"{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set (c, d) = 'xy' %}{{ c }}{{ d }}", ``},
	{"{% set a, b = [1, 2, 3] %}", ``},
	{"{% set x %}  block {{ 1 + 1 }} {% endset %}[{{ x }}]{% set y | upper | trim %} b {% endset %}[{{ y }}]", ``},
	{"{% set ns = 5 %}{% set ns.x = 1 %}", ``},
	// loops
	{"{% for i in range(4) %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", ``},
	{"{% for i in 'abc' %}{{ loop.previtem }}-{{ i }}-{{ loop.nextitem }};{% endfor %}", ``},
	{"{% for i in range(5) if i is odd %}{{ i }}{{ loop.index }}{{ loop.cycle('a', 'b') }}{% else %}none{% endfor %}", ``},
	{"{% for i in [] %}x{% else %}empty{% endfor %}{% for i in [1, 2, 3] %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", ``},
	{"{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{{ v }}{% endfor %}", ``},
	{"{% for a, b in [[1, 2], [3, 4]] %}{{ a * b }},{% endfor %}", ``},
	{"{% for a, b in [[1, 2, 3]] %}{% endfor %}", ``},
	{"{% for x in 5 %}{% endfor %}", ``},
	{"{% for x in none %}{% endfor %}", ``},
	{"{% for item in tree recursive %}{{ item.name }}{% if item.children %}({{ loop(item.children) }}){% endif %}{% endfor %}",
		`{"tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c"}]}, {"name": "d"}]}`},
	{"{% for i in [1, 1, 2] %}{% if loop.changed(i) %}{{ i }}{% endif %}{% endfor %}{{ loop }}", ``},
	{"{% for outer in [1, 2] %}{% for inner in 'ab' %}{{ loop.index }}{{ inner }}{% endfor %}{{ loop.index }}{% endfor %}", ``},
	// macros and call blocks
	{"{% macro f(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(1, c=5) }}|{{ f() }}", ``},
	{"{% macro f(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }}", ``},
	{"{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", ``},
	{"{% macro f(a) %}{{ a }}{% endmacro %}{{ f(b=1) }}", ``},
	{"{% macro list(items) %}<{% for i in items %}{{ caller(i) }}{% endfor %}>{% endmacro %}{% call(x) list([1, 2]) %}[{{ x }}]{% endcall %}", ``},
	{"{% macro f() %}{{ caller() }}{% endmacro %}{{ f() }}", ``},
	{"{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}|{{ rec }}", ``},
	{"{% filter upper %}abc {{ 'd' }}{% endfilter %}{% filter indent(2, true) | trim %}\nx\ny\n{% endfilter %}", ``},
	// expressions and operators
	{"{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}", ``},
	{"{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1.0 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 10 / 4 }} {{ 3.0 // 2 }} {{ 7.5 % 2 }}", ``},
	{"{{ 1 / 0 }}", ``},
	{"{{ 1 // 0 }}", ``},
	{"{{ 'a' ~ 1 ~ none ~ true ~ undefined_thing ~ [1] }}", ``},
	{"{{ 'a' ~ 1 + 2 }}", ``},
	{"{{ 1 + 2 is odd }} {{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 in [1, 2] }} {{ 'b' not in 'abc' }}", ``},
	{"{{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == (1, 2) }} {{ [1] == (1,) }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }}", ``},
	{"{{ 1 < 'a' }}", ``},
	{"{{ none < 1 }}", ``},
	{"{{ x < 1 }}", ``},
	{"{{ 1 in 'abc' }}", ``},
	{"{{ 'a' in none }}", ``},
	{"{{ 'a' in x }} {{ x in [1] }} {{ [1] in {'a': 1} }}", ``},
	{"{{ 'x' * 3 }} {{ 3 * 'ab' }} {{ [1, 2] * 2 }} {{ 'a' * -1 }} {{ [1] + [2] }} {{ (1,) + (2,) }}", ``},
	{"{{ 'a' * 1.5 }}", ``},
	{"{{ [1] + (2,) }}", ``},
	{"{{ 1 + 'a' }}", ``},
	{"{{ 1 - none }}", ``},
	{"{{ -'a' }}", ``},
	{"{{ - x }}", ``},
	{"{{ true and 'x' }} {{ 0 or [] or 'y' }} {{ none and 1 }} {{ '' or 0 }} {{ not none }}", ``},
	{"{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 }}| {{ ('a' if false) is defined }}", ``},
	{"{{ 1 if true else 2 if false else 3 }} {{ [1, 2, 3][1:] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1, 2, 3][-1] }} {{ 'abc'[5] }}|{{ [1,2,3][::2] }} {{ [1,2,3][5:] }}", ``},
	{"{{ 'abc'[::0] }}", ``},
	{"{{ [1, 2][1.0] }}|{{ [1, 2]['x'] }}|{{ none[1:] }}|{{ 5[0] }}|{{ {'a': 1}[0] }}", ``},
	{"{{ x.y }}", ``},
	{"{{ x[0] }}", ``},
	{"{{ x() }}", ``},
	{"{{ 'abc'() }}", ``},
	{"{{ none.foo }}|{{ none['x'] }}|{{ (1).real }}|{{ {'a': 1}.a }}|{{ {'items': 1}.items is callable }}|{{ {'items': 1}['items'] }}", ``},
	{"{{ {'a': 1}.b.c }}", ``},
	{"{{ [].append }}|{{ {}.update }}|{{ 'x'.__class__ }}", ``},
	{"{{ [].append(1) }}", ``},
	{"{{ {}.pop('a') }}", ``},
	{"{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [1, 'a', \"b'c\", none, true, 1.5, [2]] }} {{ {'k': 'v', 'n': none} }} {{ 'it''s' }}", ``},
	{"{{ {'a': 1}.items() }} {{ {'a': 1}.keys() }} {{ {'a': 1}.values() }} {{ range(3) }} {{ range(1, 10, 2) }}", ``},
	{"{{ \"a'b\" }}|{{ ['a\\'b', 'a\"b', 'a\\'\"b', '\\n\\t\\\\', '\\x01', 'é', '\\u200b'] }}", ``},
	{"{{ 'a' 'b' \"c\" }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_0.5_0 }} {{ 1e3 }}", ``},
	{"{{ {1: 'a', 'b': 2} }}", ``},
	{"{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ dict([['k', 'v']]) }}", ``},
	{"{{ range(3)|list }} {{ range(5, 0, -2)|list }} {{ range(100001) }}", ``},
	{"{{ range(1.5) }}", ``},
	{"{{ range(100000)|length }}", ``},
	{"{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set j = joiner('|') %}{{ j() }}x{{ j() }}y", ``},
	// undefined
	{"[{{ undefined_thing }}]{% for x in undefined_thing %}x{% endfor %}{{ undefined_thing|length }}{{ undefined_thing is iterable }}{{ undefined_thing == undefined_thing }}{{ undefined_thing|default('d') }}{{ undefined_thing|string }}|{{ undefined_thing|list }}", ``},
	{"{{ undefined_thing is defined }} {{ undefined_thing is undefined }} {{ undefined_thing is none }} {{ not undefined_thing }} {{ undefined_thing|d(none) is none }}", ``},
	{"{{ undefined_thing + 1 }}", ``},
	{"{{ undefined_thing|int }}", ``},
	{"{{ undefined_thing|tojson }}", ``},
	{"{{ undefined_thing|upper }}|{{ undefined_thing|trim }}|{{ undefined_thing|join(',') }}|{{ undefined_thing|first }}|{{ undefined_thing|last }}|{{ undefined_thing|sort }}", ``},
	{"{{ undefined_thing.attr }}", ``},
	{"{{ undefined_thing|items|list }} {{ undefined_thing|select|list }}", ``},
	{"{{ undefined_thing|abs }}", ``},
	{"{{ undefined_thing|round }}", ``},
	// tests
	{"{{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby 3 }}{{ 6 is divisibleby(4) }}{{ none is none }}{{ true is boolean }}{{ 1 is boolean }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is number }}", ``},
	{"{{ 'a' is string }}{{ {} is mapping }}{{ [] is mapping }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ range is callable }}{{ 'a' is callable }}", ``},
	{"{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aB' is lower }}{{ 1 is in [1] }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 1 is lt 2 }}{{ 1 is le 0 }}{{ 1 is == 1 }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'x' is escaped }}{{ ('x'|safe) is escaped }}", ``},
	{"{{ none is sameas none }}{{ 1 is sameas 1 }}{{ [] is sameas [] }}{{ true is true }}{{ 1 is true }}{{ false is false }}", ``},
	{"{{ 'a' is odd }}", ``},
	{"{{ 1 is nosuchtest }}", ``},
	{"{% if false %}{{ 1 is nosuchtest }}{% endif %}ok", ``},
	{"{{ 1|nosuchfilter }}", ``},
	{"{% if false %}{{ 1|nosuchfilter }}{% endif %}ok", ``},
	// filters
	{"{{ -3|abs }} {{ -2.5|abs }} {{ 'hello world'|capitalize }} {{ 'ab'|center(6) }}| {{ [1,2]|count }} {{ none|default('x') }} {{ ''|default('x', true) }} {{ 0|d('z', boolean=true) }}", ``},
	{"{{ {'b': 1, 'A': 2, 'c': 0}|dictsort }} {{ {'b': 1, 'A': 2}|dictsort(true) }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}", ``},
	{"{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|escape|escape }} {{ 5|e }} {{ none|e }} {{ '<i>'|forceescape }}", ``},
	{"{{ [3, 1, 2]|first }} {{ []|first }}| {{ 'abc'|first }} {{ [1, 2]|last }} {{ 'abc'|last }} {{ {'a': 1, 'b': 2}|last }}", ``},
	{"{{ '3.5'|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 3|float }} {{ ' 1e3 '|float }} {{ 'inf'|float }} {{ none|float }}", ``},
	{"{{ '42'|int }} {{ '42.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ -3.9|int }} {{ '0x1A'|int(base=16) }} {{ '1_000'|int }} {{ ' 12 '|int }} {{ true|int }} {{ none|int }}", ``},
	{"{{ '%s-%d-%05.2f-%x-%r-%%'|format('a', 3, 2.5, 255, 'q') }} {{ '%(a)s!'|format(a=1) }} {{ 'hi %s' % 'you' }} {{ '%s, %s' % (1, none) }} {{ '%-4s|' % 'a' }}", ``},
	{"{{ '%d' % 'x' }}", ``},
	{"{{ '%s %s' % (1,) }}", ``},
	{"{{ '%s' % (1, 2) }}", ``},
	{"{% for g in [{'k': 'b', 'v': 1}, {'k': 'a', 'v': 2}, {'k': 'B', 'v': 3}]|groupby('k') %}{{ g.grouper }}={{ g.list|map(attribute='v')|list }};{% endfor %}", ``},
	{"{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}|{{ ''|indent }}|{{ 'x\\r\\ny'|indent(1) }}", ``},
	{"{{ 5|indent }}", ``},
	{"{{ {'a': 1, 'b': [2]}|items|list }} {{ [1, 2]|join }} {{ [1, none, 'a', [2]]|join(', ') }} {{ [{'n': 'x'}, {'n': 'y'}]|join('+', attribute='n') }} {{ 'abc'|join('.') }}", ``},
	{"{{ [1]|items|list }}", ``},
	{"{{ none|join }}", ``},
	{"{{ 'abc'|length }} {{ 'é😀'|length }} {{ {'a': 1}|length }} {{ (1, 2)|length }} {{ range(4)|length }}", ``},
	{"{{ 5|length }}", ``},
	{"{{ [1, 2]|select('odd')|length }}", ``},
	{"{{ 'ab'|list }} {{ {'x': 1}|list }} {{ (1, 2)|list }} {{ 'ABC'|lower }} {{ 'abc'|upper }} {{ none|upper }} {{ 'ß'|upper }}", ``},
	{"{{ [{'a': 1}, {'a': 2}, {}]|map(attribute='a')|list }} {{ [{'a': 1}, {}]|map(attribute='a', default=0)|list }} {{ ['a', 'B']|map('upper')|list }} {{ [1.5, 2.5]|map('round')|list }} {{ [' a ']|map('trim')|join }}", ``},
	{"{{ [{'a': {'b': 5}}]|map(attribute='a.b')|list }} {{ [[1, 2]]|map(attribute='1')|list }}", ``},
	{"{{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ ['b', 'A', 'c']|max }} {{ ['b', 'A', 'c']|max(case_sensitive=true) }} {{ []|max }}| {{ [{'n': 2}, {'n': 5}]|max(attribute='n') }}", ``},
	{"{{ [1, 2, 3, 4]|select('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3]|reject('lessthan', 2)|list }} {{ [{'r': 'u'}, {'r': 'a'}]|selectattr('r', 'equalto', 'u')|list }} {{ [{'x': 1}, {}]|selectattr('x', 'defined')|list }} {{ [{'x': 1}, {'x': 0}]|rejectattr('x')|list }}", ``},
	{"{{ [1]|select('nosuch')|list }}", ``},
	{"{{ 'aXbX'|replace('X', '-') }} {{ 'aXbX'|replace('X', '-', 1) }} {{ 1234|replace(2, 9) }} {{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ (1, 2)|reverse|list }}", ``},
	{"{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1.5|round(0, 'floor') }} {{ 1.2|round(0, 'ceil') }} {{ 5|round }} {{ 1234|round(-2) }} {{ 1250|round(-2) }} {{ -0.5|round }} {{ 2.345|round(1, 'common') }}", ``},
	{"{{ 'x'|round }}", ``},
	{"{{ ('<b>'|safe) }} {{ ('<b>'|safe) ~ '<i>' }} {{ ('<b>'|safe) + '<i>' }} {{ '<i>' + ('<b>'|safe) }} {{ ('<b>'|safe) * 2 }} {{ ('a<b>'|safe).upper() + '&' }} {{ ('<b>'|safe)|string + '<' }} {{ ('x'|safe).replace('x', '<') }}", ``},
	{"{{ ('<b>%s'|safe) % '<i>' }} {{ ('<b>{}'|safe).format('<i>') }} {{ ('|'|safe).join(['<a>', '<b>'|safe]) }} {{ ('<b>'|safe)[0] + '<' }} {{ ('<b>'|safe).split('b') }}", ``},
	{"{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3]|slice(2, 'x')|list }}", ``},
	{"{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1]|sort(reverse=true) }} {{ [{'n': 2, 'm': 'b'}, {'n': 1, 'm': 'a'}, {'n': 2, 'm': 'a'}]|sort(attribute='n,m') }}", ``},
	{"{{ [1, 'a']|sort }}", ``},
	{"{{ 1|string }} {{ none|string }} {{ [1]|string }} {{ 'a <b>'|striptags }} {{ '<p>x   <!-- c --> y &amp; z</p>'|striptags }}", ``},
	{"{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ [{'v': 1}, {'v': 2}]|sum(attribute='v') }} {{ [[1], [2]]|sum(start=[]) }} {{ []|sum }}", ``},
	{"{{ ['a']|sum }}", ``},
	{"{{ 'hello wORLD-foo(bar) [x] {y} <z>'|title }} {{ \"they're bill's\"|title }} {{ 'hello world'.title() }} {{ \"they're\".title() }}", ``},
	{"{{ '  x  '|trim }}| {{ 'xxaxx'|trim('x') }} {{ ('a' * 300)|truncate|length }} {{ 'hello world foo'|truncate(9) }} {{ 'hello world foo'|truncate(9, true) }} {{ 'hello world foo'|truncate(11, false, '..', 0) }} {{ 'short'|truncate(3, leeway=5) }}", ``},
	{"{{ 'x'|truncate(1) }}", ``},
	{"{{ [1, 2, 1, 3]|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [{'k': 1}, {'k': 1}, {'k': 2}]|unique(attribute='k')|list }}", ``},
	{"{{ [[1], [1]]|unique|list }}", ``},
	{"{{ 'one two, three_four 5'|wordcount }} {{ {'a': 1}|attr('a') }}| {{ 'abc'|attr('upper')() }}", ``},
	// tojson
	{"{{ x|tojson }}", `{"x": {"s": "é\"\\\n\u0001<>&'", "i": -3, "f": 1.5, "e": 1e20, "z": 0.0, "b": true, "n": null, "l": [1, [2, {}], []], "d": {}}}`},
	{"{{ x|tojson(indent=2) }}|{{ x|tojson(indent='\\t') }}|{{ x|tojson(indent=0) }}", `{"x": {"a": [1, {"b": []}], "c": {}}}`},
	{"{{ x|tojson(separators=(',', ':')) }} {{ x|tojson(sort_keys=true) }} {{ x|tojson(ensure_ascii=true) }} {{ x|tojson(indent=1, separators=(', ', ' = ')) }}", `{"x": {"z": "é😀", "a": [1, 2]}}`},
	{"{{ (1, 'a')|tojson }} {{ 'x'|safe|tojson }} {{ 1.0|tojson }} {{ 12345678901234567890.0|tojson }}", ``},
	{"{{ namespace(a=1)|tojson }}", ``},
	{"{{ x|tojson }}", `{"x": 9007199254740993}`},
	{"{{ x }} {{ x.a }} {{ x|string }}", `{"x": {"a": 1.0, "b": 2.50, "c": 1e2, "d": -0.0}}`},
	// string methods
	{"{{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a '.lstrip() }}|{{ ' a '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}", ``},
	{"{{ 'abc'.startswith('a') }}{{ 'abc'.startswith(('x', 'b'), 1) }}{{ 'abc'.endswith('c') }}{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}{{ 'abcabc'.rfind('b') }}{{ 'abcb'.count('b') }}{{ 'éa'.find('a') }}", ``},
	{"{{ 'abc'.index('z') }}", ``},
	{"{{ '-'.join(['a', 'b']) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }}", ``},
	{"{{ '-'.join([1, 2]) }}", ``},
	{"{{ 'a1'.isalnum() }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}{{ 'Ab Cd'.istitle() }}{{ ''.isdigit() }}{{ 'aBc'.swapcase() }}{{ 'abc'.capitalize() }}", ``},
	{"{{ '{} and {}'.format(1, 'b') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}-{y}'.format(x=1, y=[2]) }} {{ '{:>5}|{:<4}|{:^5}|{:05d}|{:.2f}|{:,}|{:x}|{!r}'.format('a', 'b', 'c', 42, 3.14159, 1234567, 255, 'q') }} {{ '{{}}'.format() }} {{ '{0[0]}{1.a}'.format([9], {'a': 8}) }}", ``},
	{"{{ '{}'.format() }}", ``},
	{"{{ 'abc'.nosuchmethod }}|{{ 'abc'.nosuchmethod is defined }}", ``},
	{"{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }} {{ {'a': 1}.copy() }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ {'a': 1}.keys()|list }}", ``},
	// strftime, raise_exception, errors with lines
	{"{{ strftime_now('%Y-%m-%d %d %b %Y %B %A %a %H:%M %j %y %p %I %% %-d') }}", ``},
	{"line 1\n{{ raise_exception('stop: ' ~ 42) }}", ``},
	{"{% if %}{% endif %}", ``},
	{"{% for x in y %}", ``},
	{"{% endfor %}", ``},
	{"{{ 1 + }}", ``},
	{"{{ a b }}", ``},
	{"{% nosuchtag %}", ``},
	{"{% break %}", ``},
	{"{{ 'unterminated }}", ``},
	{"{% include 'x.jinja' %}", ``},
	{"{% if false %}{% include 'x.jinja' %}{% endif %}ok", ``},
	{"{{ (1 }}", ``},
	{"{{ [1, 2 }}", ``},
	{"{{ {'a' 1} }}", ``},
	{"{# unterminated comment", ``},
	{"{{ x.0 }}|{{ x.1.y }}", `{"x": ["a", {"y": "b"}]}`},
	{"{% set x = [1, 2] %}{{ x|random is defined }}", ``},
	{"{{ 'a'|upper|lower|capitalize }} {{ -1|abs + 1 }} {{ [1, 2]|first + 1 }} {{ 'x' if [1]|length else 'y' }}", ``},
	{"{% generation %}{% set g = 1 %}gen {{ 'x' }}{% endgeneration %}{{ g is defined }}", ``},
	{"{% print 'a', 1 %}{% block b %}in block {{ 1 }}{% endblock %}", ``},
	{"{{ messages[0].content }} {{ messages|length }} {{ add_generation_prompt }} {{ bos_token }}{{ eos_token }} {{ tools }} {{ documents }}", ``},
	// scoping and control flow corners
	{"{% set x = 1 %}{% for i in [1, 2] %}{% if i == 2 %}{% set x = 5 %}{% endif %}{{ x }}{% endfor %}{{ x }}", ``},
	{"{% for i in [1, 2] %}{% set i = i * 10 %}{{ i }}{% endfor %}", ``},
	{"{% for i in [1] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}", ``},
	{"{% macro outer(a) %}{% macro inner() %}[{{ a }}]{% endmacro %}{{ inner() }}{% endmacro %}{{ outer(7) }}", ``},
	{"{% macro m(ns) %}{% set ns.v = ns.v + 1 %}{% endmacro %}{% set n = namespace(v=1) %}{{ m(n) }}{{ m(n) }}{{ n.v }}", ``},
	{"{{ loop }}|{{ loop is defined }}", ``},
	{"{% set t = 1, 2, %}{{ t }}{% set u = (3,) %}{{ u }}", ``},
	{"{% for a, in [[1], [2]] %}{{ a }}{% endfor %}", ``},
	{"{% for x in [1, 2] %}{% for x in [3] %}{{ x }}{% endfor %}{{ x }}{% endfor %}", ``},
	{"{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }}", ``},
	{"{% set d = {} %}{% set d2 = dict(d, a=1) %}{{ d2 }}{{ d }}", ``},
	{"{% if messages %}has{% elif false %}no{% else %}else{% endif %}{% if none %}{% elif 0 %}{% else %}E{% endif %}", ``},
	{"{% for m in messages if m.role == 'user' %}{{ loop.length }}{% endfor %}{% for m in messages[::-1] %}{{ m.role }}{% endfor %}", ``},
	{"{% macro f(x=[]) %}{{ x }}{% endmacro %}{{ f() }}{{ f(x=none) }}{{ f|string }}", ``},
	{"{% call f() %}x{% endcall %}", ``},
	{"{% filter nosuch %}x{% endfilter %}", ``},
	{"{% set x %}a{% endset %}{% set x %}{{ x }}b{% endset %}{{ x }}", ``},
	{"{% with %}{% set inner = 1 %}{% endwith %}{{ inner is defined }}", ``},
	{"{% for i in range(3) %}{{ i }}{% if loop.last %}.{% else %},{% endif %}{% endfor %}", ``},
	{"{{ range(3)[1] }} {{ range(10)[2:5] | list }} {{ 2 in range(3) }} {{ range(0) | list }}", ``},
	// numbers and strings
	{"{{ '%.2f'|format(1) }} {{ '%5.1f%%' % 12.345 }} {{ '%+d' % 5 }} {{ '%c' % 65 }} {{ '%s' % [1, 2] }} {{ '%s' % ((1, 2),) }} {{ '%(x)s %(x)r' % {'x': 'q'} }}", ``},
	{"{{ 42|string|length }} {{ [1, 2, 3]|map('string')|join }} {{ 3.0|int }} {{ '3.0'|int }} {{ 10 ** 18 }} {{ 2 ** 62 - 1 + 2 ** 62 }}", ``},
	{"{{ 0.1 * 3 }} {{ 1 / 3 }} {{ 2 / 2 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }} {{ (1e308 * 10) - (1e308 * 10) }} {{ 5 // 0.5 }} {{ -5 % 0.3 }}", ``},
	{"{{ 123456789.123 }} {{ 1234567890123456.0 }} {{ 12345678901234567.0 }} {{ 0.000123 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 3.14159265358979 }}", ``},
	{"{{ 'ab' < 'b' }} {{ 'B' < 'a' }} {{ 'é' > 'z' }} {{ [1, 'a'] == [1, 'a'] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [] == () }}", ``},
	{"{{ 'a\\u0000b'|length }} {{ '\\x7f'|tojson }} {{ '\\x7f' }} {{ ['\\x7f'] }} {{ '\\u2028'|tojson }} {{ ['\\u2028'] }} {{ '\\ud7ff' }}", ``},
	{"{{ 'Ünïcödé'|upper }} {{ 'ǅ'|lower }} {{ 'ﬁ'|upper }} {{ 'İ'|lower|length }} {{ 'straße'.upper() }}", ``},
	{"{{ '  a\\u00a0'.strip()|length }} {{ '\\u3000x'.strip() }} {{ 'a\\u2029b'.splitlines() }} {{ 'a\\x1cb'.split() }}", ``},
	{"{{ '\\'' }}{{ \"\\\"\" }}{{ '\\\\' }}{{ '\\q' }}{{ '\\101\\x41\\u0041\\U00000041' }}{{ 'tab\\there' }}", ``},
	{"{{ 'multi\nline' }}|{{ 'a\r\nb'|length }}", ``},
	// tojson corners
	{"{{ [1.0, 2.5e-7, 1e100, -0.0]|tojson }} {{ {'a': none, 'b': [true, false]}|tojson(indent=2, sort_keys=true) }}", ``},
	{"{{ x|tojson(indent=2) }}", `{"x": [[], {}, [{}], {"a": []}]}`},
	{"{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}", ``},
	{"{{ ('a'|safe)|tojson }} {{ 'a\"b'|tojson }} {{ '</script>'|tojson }}", ``},
	{"{{ {'z': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }} {{ [1, 2]|tojson(indent=none) }}", ``},
	// whitespace corners
	{"a\n{%- if true %}\nb\n{%- endif %}\nc", ``},
	{"{% for x in [1, 2] %}  {{ x }}  {% endfor %}", ``},
	{"{%- set x = 1 -%}\n\n  {{- x -}}  \n\n{%- set y = 2 %}\n{{ y }}", ``},
	{"<{% if true -%}  \n  x  \n  {%- endif %}>", ``},
	{"  {# c #}  x\n  {# d #}\ny", ``},
	{"{{ 'a' }}\n{{ 'b' }}\n", ``},
	{"x {%+ if true %}y{% endif %}\n  {%+ if true +%}\nz{% endif %}", ``},
	{"{% raw -%}   x   {%- endraw %}|{%- raw %} {{ y }} {% endraw -%} |", ``},
	{"\n\n{% if true %}\n\n{% endif %}\n\n", ``},
	// generators (map, select, ...) are used up once iterated
	{"{% set g = [1, 2, 3]|select('odd') %}{% for x in g %}{{ x }}{% endfor %}|{% for x in g %}{{ x }}{% endfor %}|{{ g|list }}", ``},
	{"{% set g = [1, 2, 3]|map('string') %}{{ g|first }}{{ g|list }}{{ g|list }}", ``},
	{"{% if [0]|select %}truthy{% endif %}{% if []|select %}empty-but-truthy{% endif %}{{ ([1]|select) is iterable }}{{ ([1]|select) is sequence }}", ``},
	{"{{ (messages|selectattr('role', 'equalto', 'user')|first).content }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }}", ``},
	{"{{ [1, 2]|reverse|first }} {{ ([1, 2]|reverse|list)[0] }} {{ 'ab'|reverse|first }}", ``},
	{"{{ [1, 2]|select('odd')|last }}", ``},
	{"{{ ([1, 2]|select('odd'))[0] }}", ``},
	{"{{ [1, 2]|select('odd')|tojson }}", ``},
	{"{{ {'a': 1}|items|length }}", ``},
	{"{{ none|select|list }}{{ none|map('x')|list }}{{ none|selectattr('a')|list }}{{ 0|rejectattr('a')|list }}{{ ''|map|list }}", ``},
	{"{{ none|list }}", ``},
}
