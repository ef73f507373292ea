// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

package jinja

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The expected texts are Python Jinja2 3.1.6's, set up as transformers'
// apply_chat_template sets it up (stx's scripts/render-chat.py). stx's
// runtime/chat/jinja2_test.go checks far more against Jinja2 itself.

func render(t *testing.T, src, data string) (string, error) {
	t.Helper()
	tmpl, err := Compile(src)
	if err != nil {
		return "", err
	}
	vals := map[string]Value{}
	if data != "" {
		dec := json.NewDecoder(strings.NewReader(data))
		dec.UseNumber()
		v, err := decodeOrdered(dec)
		if err != nil {
			t.Fatal(err)
		}
		d := v.AsDict()
		for _, k := range d.Keys {
			vals[k] = d.Data[k]
		}
	}
	return tmpl.RenderValues(vals)
}

// decodeOrdered decodes JSON keeping the order of object keys.
func decodeOrdered(dec *json.Decoder) (Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		if x == '{' {
			d := NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return Value{}, err
				}
				v, err := decodeOrdered(dec)
				if err != nil {
					return Value{}, err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
		var items []Value
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return Value{}, err
			}
			items = append(items, v)
		}
		_, err := dec.Token()
		return NewList(items), err
	}
	return FromGoValue(tok), nil
}

func TestJinja2Renderings(t *testing.T) {
	for _, c := range []struct{ src, data, want string }{
		{"{{ x | tojson(indent=2) }}", "{\"x\": {\"z\": 1, \"b\": [1, 2], \"a\": {\"y\": 2, \"c\": 3}}}", "{\n  \"z\": 1,\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": {\n    \"y\": 2,\n    \"c\": 3\n  }\n}"},
		{"{% for k, v in x.items() if k != 'b' %}{{k}}={{v}};{% endfor %}", "{\"x\": {\"a\": 1, \"b\": 2, \"c\": 3}}", "a=1;c=3;"},
		{"{{ 'a\\rb'|length }} {{ '\\u00e9' }}", "", "3 é"},
		{"{{ none }}|{{ undefined }}|{{ 1.0 }}|{{ 1e20 }}|{{ [1, 'a', none, true] }}|{{ {'a': (1,)} }}", "", "None||1.0|1e+20|[1, 'a', None, True]|{'a': (1,)}"},
		{"a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "", "a\n  b\nc"},
		{"{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }};{% endfor %}{{ x }}", "", "01;02;0"},
		{"{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "", "3"},
		{"{{ ('<a>'|safe + '<b>') }}|{{ '<b>' + ('<a>'|safe) }}", "", "<a>&lt;b&gt;|&lt;b&gt;<a>"},
		{"{{ [3, 1, 2]|sort }} {{ ['b', 'A']|sort }} {{ 2.5|round }} {{ -7 // 2 }} {{ -7 % 3 }}", "", "[1, 2, 3] ['A', 'b'] 2.0 -4 2"},
		{"{{ x|selectattr('r', 'equalto', 'u')|map(attribute='c')|join(',') }}", "{\"x\": [{\"r\": \"u\", \"c\": \"1\"}, {\"r\": \"a\", \"c\": \"2\"}, {\"r\": \"u\", \"c\": \"3\"}]}", "1,3"},
		{"{% macro f(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{% endmacro %}{{ f(1) }}{{ f(1, 3, 4) }}", "", "12()13(4,)"},
		{"{{ '  x '.strip() }}|{{ 'a,b'.split(',') }}|{{ '{} {}'.format(1, 'b') }}|{{ '%s-%d' % ('a', 3) }}", "", "x|['a', 'b']|1 b|a-3"},
		{"{{ 'straße'|upper }} {{ 'Hello World'|title }} {{ 'they\\'re'.title() }}", "", "STRASSE Hello World They'Re"},
		{"{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}", "", "empty13"},
	} {
		got, err := render(t, c.src, c.data)
		if err != nil || got != c.want {
			t.Errorf("%q:\n got %q, %v\nwant %q", c.src, got, err, c.want)
		}
	}
}

func TestJinja2Errors(t *testing.T) {
	for _, c := range []struct{ src, kind string }{
		{"{% for t in tools %}{% endfor %}", "TypeError"},
		{"{{ '// ' + undefined }}", "UndefinedError"},
		{"{{ 'a' + {} }}", "TypeError"},
		{"{{ none[0]['text'] }}", "UndefinedError"},
		{"{{ [][0]['role'] }}", "UndefinedError"},
		{"{{ x.y }}", "UndefinedError"},
		{"{{ 1 / 0 }}", "ZeroDivisionError"},
		{"{% set l = [] %}{{ l.append(1) }}", "SecurityError"},
		{"{{ range(100001) }}", "OverflowError"},
		{"{{ raise_exception('no') }}", "TemplateError"},
	} {
		_, err := render(t, c.src, `{"tools": null}`)
		var te *Error
		if !errors.As(err, &te) || te.Kind != c.kind || te.Line != 1 {
			t.Errorf("%q: error %v, want a %s on line 1", c.src, err, c.kind)
		}
	}
}

func TestLimits(t *testing.T) {
	lim := Limits{MaxCallDepth: 8, MaxIterations: 1000, MaxStringBytes: 1000, MaxTotalBytes: 100000, MaxItems: 100}
	for _, c := range []struct{ src, limit string }{
		{"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "MaxCallDepth"},
		{"{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "MaxIterations"},
		{"{{ 'x' * 1001 }}", "MaxStringBytes"},
		{"{{ [1] * 101 }}", "MaxItems"},
		{"{% for i in 'y' * 200 %}{% set s = 'x' * 999 %}{% endfor %}", "MaxTotalBytes"},
	} {
		tmpl, err := Compile(c.src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tmpl.RenderLimits(nil, lim)
		if err == nil || !strings.Contains(err.Error(), c.limit) {
			t.Errorf("%q: error %v, want one naming %s", c.src, err, c.limit)
		}
	}
}
