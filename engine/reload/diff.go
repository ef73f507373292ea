// Package reload holds the building blocks of hot reload for `stx run`: a
// Watcher that notices settled edits of the recipe files and re-loads them,
// Diff that splits the difference between the running recipe and the
// reloaded one into hot knob changes and structural changes, and Apply that
// makes the running recipe with only the hot changes.
//
// The engine owns the policy: it polls the Watcher at each rollout
// boundary, prints load errors (keeping the last good recipe), refuses
// structural changes with a message, and applies hot ones.
package reload

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"stx.dev/stx/schema"
)

// KnobChange is one hot knob whose value differs between two recipes. Old
// and New are the knob values as the Go field holds them (float64, int,
// string, bool, map); an optional knob that is unset is nil.
type KnobChange struct {
	Knob string
	Old  any
	New  any
}

// String formats the change for logs and events.jsonl, e.g.
// "knobs.lr: 0.001 → 0.002".
func (k KnobChange) String() string {
	return fmt.Sprintf("knobs.%s: %s → %s", k.Knob, formatValue(k.Old), formatValue(k.New))
}

// Changes is the difference between a running recipe and a reloaded one.
type Changes struct {
	// Hot are changed knobs a running job may take, in schema order.
	Hot []KnobChange
	// Structural are the changes that need a restart, one human-readable
	// line each ("roles[1].trainable: true → false",
	// "knobs.seed: 1 → 2 (cold knob)"), in recipe order.
	Structural []string
}

// Diff compares two resolved recipes field by field. A knob is hot or cold
// as the schema's @knob attribute says (schema.KnobDocs); a knob without a
// doc counts as cold, so an unknown field can never slip into a running job.
// Every other difference except the description is structural.
func Diff(old, new *schema.Recipe) (Changes, error) {
	if old == nil || new == nil {
		return Changes{}, errors.New("reload: diff of a nil recipe")
	}
	hot, err := hotKnobs()
	if err != nil {
		return Changes{}, fmt.Errorf("reload: knob docs: %w", err)
	}
	var ch Changes
	if old.Name != new.Name {
		ch.Structural = append(ch.Structural, fmt.Sprintf("name: %q → %q", old.Name, new.Name))
	}
	ov, nv := reflect.ValueOf(old).Elem(), reflect.ValueOf(new).Elem()
	rt := ov.Type()
	for i := range rt.NumField() {
		f := rt.Field(i)
		name := fieldName(f)
		switch name {
		case "", "description":
			// Name is compared above; the description never affects a run.
			continue
		case "knobs":
			diffKnobs(ov.Field(i), nv.Field(i), hot, &ch)
		default:
			diffValue(name, ov.Field(i), nv.Field(i), &ch.Structural)
		}
	}
	return ch, nil
}

// hotKnobs returns the hotness of every documented knob by name.
func hotKnobs() (map[string]bool, error) {
	docs, err := schema.KnobDocs()
	if err != nil {
		return nil, err
	}
	hot := make(map[string]bool, len(docs))
	for _, d := range docs {
		hot[d.Name] = d.Hot
	}
	return hot, nil
}

// diffKnobs compares knob by knob: each knob is one unit, so a changed map
// knob is one change, not one per key.
func diffKnobs(ov, nv reflect.Value, hot map[string]bool, ch *Changes) {
	t := ov.Type()
	for i := range t.NumField() {
		name := fieldName(t.Field(i))
		if name == "" {
			continue
		}
		a, b := knobValue(ov.Field(i)), knobValue(nv.Field(i))
		if knobEqual(a, b) {
			continue
		}
		if hot[name] {
			ch.Hot = append(ch.Hot, KnobChange{Knob: name, Old: a, New: b})
			continue
		}
		ch.Structural = append(ch.Structural,
			fmt.Sprintf("knobs.%s: %s → %s (cold knob)", name, formatValue(a), formatValue(b)))
	}
}

// knobValue is a knob's value with pointers resolved: nil for an unset
// optional knob, otherwise a copy of the pointee.
func knobValue(v reflect.Value) any {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return deepCopy(v).Interface()
}

// knobEqual compares knob values; an empty map equals a nil one (CUE
// decodes an absent map field as nil, an empty struct as an empty map).
func knobEqual(a, b any) bool {
	if isEmptyMap(a) && isEmptyMap(b) {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func isEmptyMap(x any) bool {
	v := reflect.ValueOf(x)
	return v.Kind() == reflect.Map && v.Len() == 0
}

// diffValue walks two values of the same type and appends one line per
// differing leaf, added or removed element.
func diffValue(path string, a, b reflect.Value, out *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			name := fieldName(t.Field(i))
			if name == "" {
				continue
			}
			diffValue(path+"."+name, a.Field(i), b.Field(i), out)
		}
	case reflect.Slice, reflect.Array:
		n := max(a.Len(), b.Len())
		for i := range n {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= a.Len():
				*out = append(*out, fmt.Sprintf("%s: added %s", p, formatValue(b.Index(i).Interface())))
			case i >= b.Len():
				*out = append(*out, fmt.Sprintf("%s: removed %s", p, formatValue(a.Index(i).Interface())))
			default:
				diffValue(p, a.Index(i), b.Index(i), out)
			}
		}
	case reflect.Map:
		keys := map[string]reflect.Value{}
		for _, m := range []reflect.Value{a, b} {
			for _, k := range m.MapKeys() {
				keys[fmt.Sprint(k.Interface())] = k
			}
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, name := range names {
			k := keys[name]
			av, bv := a.MapIndex(k), b.MapIndex(k)
			p := path + "." + name
			switch {
			case !av.IsValid():
				*out = append(*out, fmt.Sprintf("%s: added %s", p, formatValue(bv.Interface())))
			case !bv.IsValid():
				*out = append(*out, fmt.Sprintf("%s: removed %s", p, formatValue(av.Interface())))
			default:
				diffValue(p, av, bv, out)
			}
		}
	case reflect.Pointer, reflect.Interface:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() || b.IsNil() || a.Elem().Type() != b.Elem().Type():
			*out = append(*out, fmt.Sprintf("%s: %s → %s", path, formatValue(valueOrNil(a)), formatValue(valueOrNil(b))))
		default:
			diffValue(path, a.Elem(), b.Elem(), out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, fmt.Sprintf("%s: %s → %s", path, formatValue(a.Interface()), formatValue(b.Interface())))
		}
	}
}

func valueOrNil(v reflect.Value) any {
	if v.IsNil() {
		return nil
	}
	return v.Elem().Interface()
}

// fieldName is the CUE name of a struct field (its json tag), or "" for a
// field that has none.
func fieldName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// formatValue prints a value the way a recipe would write it: strings
// quoted, composites as JSON, unset as "unset".
func formatValue(x any) string {
	if x == nil {
		return "unset"
	}
	v := reflect.ValueOf(x)
	switch v.Kind() {
	case reflect.String:
		return fmt.Sprintf("%q", x)
	case reflect.Pointer:
		if v.IsNil() {
			return "unset"
		}
		return formatValue(v.Elem().Interface())
	case reflect.Map:
		if v.Len() == 0 {
			return "{}" // nil and empty alike: CUE's empty struct
		}
	case reflect.Slice:
		if v.Len() == 0 {
			return "[]"
		}
	}
	switch v.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		if b, err := json.Marshal(x); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(x)
}
