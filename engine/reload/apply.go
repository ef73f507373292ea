package reload

import (
	"reflect"

	"stx.dev/stx/schema"
)

// Apply returns a deep copy of the running recipe with the hot knob changes
// of ch applied; structural changes are ignored (the caller refuses them).
// The running recipe is not modified and shares no memory with the result,
// so the engine may hand the copy to the next rollout while the old one is
// still read elsewhere. A change that names no knob of schema.Knobs, or
// whose value cannot be converted to the knob's type, is skipped: Diff never
// produces one.
func Apply(running *schema.Recipe, ch Changes) *schema.Recipe {
	if running == nil {
		return nil
	}
	out := deepCopy(reflect.ValueOf(running).Elem()).Interface().(schema.Recipe)
	knobs := reflect.ValueOf(&out.Knobs).Elem()
	fields := knobFields()
	for _, c := range ch.Hot {
		i, ok := fields[c.Knob]
		if !ok {
			continue
		}
		setKnob(knobs.Field(i), c.New)
	}
	return &out
}

// knobFields maps knob names to their field index in schema.Knobs.
func knobFields() map[string]int {
	t := reflect.TypeFor[schema.Knobs]()
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if name := fieldName(t.Field(i)); name != "" {
			m[name] = i
		}
	}
	return m
}

// setKnob stores x in the knob field f: nil unsets an optional (pointer)
// knob, a value is copied so the result shares nothing with the Changes.
func setKnob(f reflect.Value, x any) {
	target := f.Type()
	if target.Kind() == reflect.Pointer {
		if x == nil {
			f.SetZero()
			return
		}
		target = target.Elem()
	} else if x == nil {
		return
	}
	v, ok := convert(reflect.ValueOf(x), target)
	if !ok {
		return
	}
	v = deepCopy(v)
	if f.Kind() == reflect.Pointer {
		p := reflect.New(target)
		p.Elem().Set(v)
		f.Set(p)
		return
	}
	f.Set(v)
}

// convert makes v a value of type t when it already is one or is a number
// that converts (an int given for a float knob).
func convert(v reflect.Value, t reflect.Type) (reflect.Value, bool) {
	if v.Type().AssignableTo(t) {
		return v, true
	}
	if isNumber(v.Kind()) && isNumber(t.Kind()) {
		return v.Convert(t), true
	}
	return reflect.Value{}, false
}

func isNumber(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// deepCopy returns a copy of v that shares no slices, maps or pointers with
// it (recipes hold all three: roles, init arguments, optional knobs).
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(deepCopy(v.Elem()))
		return p
	case reflect.Interface:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		c := reflect.New(v.Type()).Elem()
		c.Set(deepCopy(v.Elem()))
		return c
	case reflect.Slice:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			s.Index(i).Set(deepCopy(v.Index(i)))
		}
		return s
	case reflect.Map:
		if v.IsNil() {
			return reflect.Zero(v.Type())
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			m.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return m
	case reflect.Struct:
		s := reflect.New(v.Type()).Elem()
		s.Set(v) // unexported fields (none today) keep their values
		for i := range v.NumField() {
			if s.Field(i).CanSet() {
				s.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
		return s
	default:
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		return c
	}
}
