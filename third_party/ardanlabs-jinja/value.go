// Based on github.com/ardanlabs/jinja v1.8.0 (Copyright 2026 Ardan Labs), Apache License 2.0 (LICENSE).
// Changed for stx: see PATCHES.md.

// Package jinja implements a Jinja template engine purpose-built for LLM
// chat templates, with the semantics of Python's Jinja2 3.1 configured as
// Hugging Face transformers configures it for apply_chat_template: an
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension, the {% generation %} tag, a tojson filter that is
// json.dumps (ensure_ascii=False, no key sorting), and the raise_exception
// and strftime_now globals. Values behave as their Python counterparts do:
// None prints as "None", undefined variables print as "" and iterate as
// empty but fail in arithmetic and attribute access, `+` of a string and a
// dict is an error, and so on. Rendering is bounded (Limits).
package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
)

// =============================================================================

// Kind represents the type of a template value.
type Kind int

const (
	KindUndefined Kind = iota
	KindNone
	KindBool
	KindInt
	KindFloat
	KindString
	KindList
	KindDict
	KindCallable
	// KindObject is an object with attributes only: a namespace(), a
	// loop, a cycler, a joiner.
	KindObject
)

// =============================================================================

// Value is a tagged union over JSON-like types used throughout the template
// engine. The v field holds one of: bool, int64, float64, string, *List,
// *Dict, Callable, *Object, or, for an undefined value, the *undefined that
// says why it is undefined. safe marks a string as Markup (the |safe and
// |escape filters): adding a plain string to it escapes that string, as
// Python's markupsafe does.
type Value struct {
	kind Kind
	safe bool
	v    any
}

// undefined describes why a value is undefined, for the error raised when
// it is used in a way Jinja2's Undefined does not allow.
type undefined struct {
	name   string // the variable, attribute or item looked up
	keyRep string // repr of a non-string item key ("0"), else ""
	obj    *Value // the object it was looked up on; nil for a variable
	hint   string // a message that replaces the default one
}

// Undefined returns an undefined value.
func Undefined() Value {
	return Value{kind: KindUndefined}
}

func undefinedName(name string) Value {
	return Value{kind: KindUndefined, v: &undefined{name: name}}
}

func undefinedHint(hint string) Value {
	return Value{kind: KindUndefined, v: &undefined{hint: hint}}
}

// undefinedItem is the undefined value of obj[key] or obj.key.
func undefinedItem(obj Value, key Value) Value {
	o := obj
	u := &undefined{obj: &o}
	if key.kind == KindString {
		u.name = key.v.(string)
	} else {
		u.keyRep, _ = reprValue(key, 0)
		if u.keyRep == "" {
			u.keyRep = "?"
		}
	}
	return Value{kind: KindUndefined, v: u}
}

// message is Jinja2's Undefined._undefined_message.
func (v Value) undefinedMessage() string {
	u, _ := v.v.(*undefined)
	switch {
	case u == nil:
		return "value is undefined"
	case u.hint != "":
		return u.hint
	case u.obj == nil:
		return pyReprString(u.name) + " is undefined"
	case u.keyRep != "":
		return typeRepr(*u.obj) + " has no element " + u.keyRep
	}
	return pyReprString(typeRepr(*u.obj)) + " has no attribute " + pyReprString(u.name)
}

// typeRepr is Jinja2's object_type_repr.
func typeRepr(v Value) string {
	if v.kind == KindNone {
		return "None"
	}
	return typeName(v) + " object"
}

// typeName is the name of v's Python type.
func typeName(v Value) string {
	switch v.kind {
	case KindUndefined:
		return "Undefined"
	case KindNone:
		return "NoneType"
	case KindBool:
		return "bool"
	case KindInt:
		return "int"
	case KindFloat:
		return "float"
	case KindString:
		if v.safe {
			return "Markup"
		}
		return "str"
	case KindList:
		l := v.v.(*List)
		switch {
		case l.gen:
			return "generator"
		case l.view != "":
			return l.view
		case l.Tuple:
			return "tuple"
		case l.rng != "":
			return "range"
		}
		return "list"
	case KindDict:
		return "dict"
	case KindCallable:
		return "function"
	case KindObject:
		return v.v.(*Object).Type
	}
	return "object"
}

// None returns a none value.
func None() Value {
	return Value{kind: KindNone}
}

// NewBool returns a boolean value.
func NewBool(b bool) Value {
	return Value{kind: KindBool, v: b}
}

// NewInt returns an integer value.
func NewInt(n int64) Value {
	return Value{kind: KindInt, v: n}
}

// NewFloat returns a floating-point value.
func NewFloat(f float64) Value {
	return Value{kind: KindFloat, v: f}
}

// NewString returns a string value.
func NewString(s string) Value {
	return Value{kind: KindString, v: s}
}

// NewMarkup returns a string marked safe, as Python's markupsafe.Markup.
func NewMarkup(s string) Value {
	return Value{kind: KindString, safe: true, v: s}
}

// NewList returns a list value containing the provided items.
func NewList(items []Value) Value {
	return Value{kind: KindList, v: &List{Items: items}}
}

func newTuple(items []Value) Value {
	return Value{kind: KindList, v: &List{Items: items, Tuple: true}}
}

// newGenerator is a one-shot iterator over items, as the generators that
// Jinja2's map, select, reject, selectattr and rejectattr filters return.
func newGenerator(items []Value) Value {
	return Value{kind: KindList, v: &List{Items: items, gen: true}}
}

// NewDict returns an empty dict value.
func NewDict() Value {
	return Value{kind: KindDict, v: &Dict{Data: make(map[string]Value)}}
}

// NewCallable returns a callable value.
func NewCallable(name string, fn func(args []Value, kwargs map[string]Value) (Value, error)) Value {
	return Value{kind: KindCallable, v: Callable{Name: name, Fn: fn}}
}

// =============================================================================

// IsUndefined reports whether v is undefined.
func (v Value) IsUndefined() bool { return v.kind == KindUndefined }

// IsNone reports whether v is none.
func (v Value) IsNone() bool { return v.kind == KindNone }

// IsBool reports whether v is a boolean.
func (v Value) IsBool() bool { return v.kind == KindBool }

// IsInt reports whether v is an integer.
func (v Value) IsInt() bool { return v.kind == KindInt }

// IsFloat reports whether v is a float.
func (v Value) IsFloat() bool { return v.kind == KindFloat }

// IsNumber reports whether v is an integer or float.
func (v Value) IsNumber() bool { return v.kind == KindInt || v.kind == KindFloat }

// IsString reports whether v is a string.
func (v Value) IsString() bool { return v.kind == KindString }

// IsSafe reports whether v is a string marked safe (Markup).
func (v Value) IsSafe() bool { return v.kind == KindString && v.safe }

// IsList reports whether v is a list.
func (v Value) IsList() bool { return v.kind == KindList }

// IsDict reports whether v is a dict.
func (v Value) IsDict() bool { return v.kind == KindDict }

// IsCallable reports whether v is callable.
func (v Value) IsCallable() bool { return v.kind == KindCallable }

// Kind returns v's kind.
func (v Value) Kind() Kind { return v.kind }

// IsTruthy returns the Python-style truthiness of the value.
func (v Value) IsTruthy() bool {
	switch v.kind {
	case KindUndefined:
		return false
	case KindNone:
		return false
	case KindBool:
		return v.v.(bool)
	case KindInt:
		return v.v.(int64) != 0
	case KindFloat:
		return v.v.(float64) != 0.0
	case KindString:
		return len(v.v.(string)) > 0
	case KindList:
		l := v.v.(*List)
		if l.gen {
			return true // a generator object is always true
		}
		return l.Len() > 0
	case KindDict:
		return v.v.(*Dict).Len() > 0
	case KindCallable, KindObject:
		return true
	}

	return false
}

// =============================================================================

// AsBool returns the bool held by v. It panics if v is not a bool.
func (v Value) AsBool() bool { return v.v.(bool) }

// AsInt returns the int64 held by v. It panics if v is not an int.
func (v Value) AsInt() int64 { return v.v.(int64) }

// AsFloat returns the float64 held by v. It panics if v is not a float.
func (v Value) AsFloat() float64 { return v.v.(float64) }

// AsString returns the string held by v. It panics if v is not a string.
func (v Value) AsString() string { return v.v.(string) }

// AsList returns the *List held by v. It panics if v is not a list.
func (v Value) AsList() *List { return v.v.(*List) }

// AsDict returns the *Dict held by v. It panics if v is not a dict.
func (v Value) AsDict() *Dict { return v.v.(*Dict) }

// AsCallable returns the *Callable held by v. It panics if v is not callable.
func (v Value) AsCallable() *Callable {
	c := v.v.(Callable)
	return &c
}

// =============================================================================

// String returns a Python-style string representation of the value (its
// repr).
func (v Value) String() string {
	s, err := reprValue(v, 0)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return s
}

// Equals reports whether v and other are equal as Python's == says.
func (v Value) Equals(other Value) bool {
	eq, _ := pyEqual(v, other, 0)
	return eq
}

// =============================================================================

// List holds an ordered sequence of values: a Python list, or a tuple, a
// range, a dict view or a generator, which differ in how they print and
// what they allow.
type List struct {
	Items []Value
	// Tuple marks a tuple (it prints as (a, b)).
	Tuple  bool
	fields []string // a named tuple's attribute names (groupby's grouper, list)
	view   string   // "dict_items", "dict_keys", "dict_values": a dict view
	rng    string   // the repr of a range object, "range(0, 3)"
	gen    bool     // a generator: iterated once, no len, no subscript
}

// Len returns the number of items in the list.
func (l *List) Len() int { return len(l.Items) }

// Get returns the item at position i. It panics if i is out of range.
func (l *List) Get(i int) Value { return l.Items[i] }

// Append adds a value to the end of the list.
func (l *List) Append(v Value) { l.Items = append(l.Items, v) }

// =============================================================================

// Dict is an ordered map of string keys to values. Insertion order is
// preserved via the Keys slice.
//
// A key that is not a string (a dict literal's {1: 'a'}) is kept under
// "\x00" and its canonical repr (1, 1.0 and True are one key, as in
// Python), with its value in keyVals, so that it prints, iterates and
// serializes as the key it is.
type Dict struct {
	Keys    []string
	Data    map[string]Value
	keyVals map[string]Value
}

// hashKey is the entry name of a key; unhashable values (lists, dicts) are
// a TypeError.
func hashKey(k Value) (string, error) {
	switch k.kind {
	case KindString:
		return k.v.(string), nil
	case KindInt, KindBool:
		return "\x00" + itoa(toInt(k)), nil
	case KindFloat:
		f := k.v.(float64)
		if f == math.Trunc(f) && math.Abs(f) < 9e18 {
			return "\x00" + itoa(int64(f)), nil
		}
		return "\x00" + formatFloat(f), nil
	case KindNone:
		return "\x00None", nil
	case KindUndefined:
		return "\x00Undefined", nil
	case KindList:
		if l := k.v.(*List); l.Tuple {
			s := "\x00("
			for i, item := range l.Items {
				ks, err := hashKey(item)
				if err != nil {
					return "", err
				}
				if i > 0 {
					s += ", "
				}
				s += ks
			}
			return s + ")", nil
		}
	case KindCallable, KindObject:
		return fmt.Sprintf("\x00%p", k.v), nil
	}
	return "", errorf("TypeError", "unhashable type: %s", pyReprString(typeName(k)))
}

// setKey sets the entry of a key of any hashable type.
func (d *Dict) setKey(k, v Value) error {
	ks, err := hashKey(k)
	if err != nil {
		return err
	}
	if k.kind != KindString && !d.Has(ks) {
		if d.keyVals == nil {
			d.keyVals = map[string]Value{}
		}
		d.keyVals[ks] = k
	}
	d.Set(ks, v)
	return nil
}

// keyValue is the key of the entry ks.
func (d *Dict) keyValue(ks string) Value {
	if v, ok := d.keyVals[ks]; ok {
		return v
	}
	return NewString(ks)
}

// Get returns the value for key and reports whether it was found.
func (d *Dict) Get(key string) (Value, bool) {
	v, ok := d.Data[key]
	return v, ok
}

// Set inserts or updates a key-value pair. New keys are appended to the
// insertion-order list.
func (d *Dict) Set(key string, val Value) {
	if _, ok := d.Data[key]; !ok {
		d.Keys = append(d.Keys, key)
	}
	d.Data[key] = val
}

// Has reports whether key exists in the dict.
func (d *Dict) Has(key string) bool {
	_, ok := d.Data[key]
	return ok
}

// Len returns the number of entries in the dict.
func (d *Dict) Len() int { return len(d.Keys) }

// OrderedKeys returns the keys in insertion order.
func (d *Dict) OrderedKeys() []string {
	out := make([]string, len(d.Keys))
	copy(out, d.Keys)
	return out
}

func (d *Dict) clone() *Dict {
	n := &Dict{Keys: make([]string, len(d.Keys)), Data: make(map[string]Value, len(d.Data))}
	copy(n.Keys, d.Keys)
	for k, v := range d.Data {
		n.Data[k] = v
	}
	for k, v := range d.keyVals {
		if n.keyVals == nil {
			n.keyVals = map[string]Value{}
		}
		n.keyVals[k] = v
	}
	return n
}

// =============================================================================

// Callable represents a named callable function within the template engine.
type Callable struct {
	Name string
	Fn   func(args []Value, kwargs map[string]Value) (Value, error)
	// call, when set, is used instead of Fn: it keeps the keyword
	// arguments' order (dict(a=1, b=2) is ordered) and reaches the
	// evaluator (limits, filters, attribute lookups).
	call func(e *evaluator, args []Value, kw kwargs) (Value, error)
	repr string
}

// Object is a value with attributes only: a namespace() (whose attributes
// {% set ns.x = ... %} may assign), a loop, a cycler, a joiner.
type Object struct {
	Type     string
	Attrs    *Dict
	settable bool
	getattr  func(name string) (Value, bool)
	call     func(e *evaluator, args []Value, kw kwargs) (Value, error)
	repr     func() string
}

// =============================================================================

// FromGoValue converts a plain Go value to a Value. Supported source types
// are nil, bool, int, int64, float64, json.Number, string, []any,
// map[string]any, []Value and Value. For map[string]any the keys are
// sorted for deterministic order. Unrecognized types produce Undefined.
func FromGoValue(v any) Value {
	switch val := v.(type) {
	case nil:
		return None()

	case Value:
		return val

	case bool:
		return NewBool(val)

	case int:
		return NewInt(int64(val))

	case int64:
		return NewInt(val)

	case float64:
		return NewFloat(val)

	case json.Number:
		// json.Number preserves whether the source JSON used a decimal
		// point or exponent. Integers (no '.', 'e', 'E') become Int so
		// that downstream tojson emits them as integers — matching
		// Python json.dumps, which keeps int and float distinct.
		s := string(val)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := val.Int64(); err == nil {
				return NewInt(i)
			}
		}
		if f, err := val.Float64(); err == nil {
			return NewFloat(f)
		}
		return NewString(s)

	case string:
		return NewString(val)

	case []Value:
		items := make([]Value, len(val))
		copy(items, val)
		return NewList(items)

	case []any:
		items := make([]Value, len(val))
		for i, item := range val {
			items[i] = FromGoValue(item)
		}
		return NewList(items)

	case map[string]any:
		d := NewDict()
		dict := d.AsDict()

		keys := make([]string, 0, len(val))
		for k := range val {
			keys = append(keys, k)
		}
		sort.Strings(keys)

		for _, k := range keys {
			dict.Set(k, FromGoValue(val[k]))
		}
		return d
	}

	// Reflection fallback for named types (e.g., []model.D where D is
	// map[string]any).
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice:
		items := make([]Value, rv.Len())
		for i := range rv.Len() {
			items[i] = FromGoValue(rv.Index(i).Interface())
		}
		return NewList(items)

	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			d := NewDict()
			dict := d.AsDict()
			iter := rv.MapRange()
			keys := make([]string, 0, rv.Len())
			vals := make(map[string]any, rv.Len())
			for iter.Next() {
				k := iter.Key().String()
				keys = append(keys, k)
				vals[k] = iter.Value().Interface()
			}
			sort.Strings(keys)
			for _, k := range keys {
				dict.Set(k, FromGoValue(vals[k]))
			}
			return d
		}
	}

	return Undefined()
}

// errorf is a shorthand for the errors a template raises.
func errorf(kind, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
