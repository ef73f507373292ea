package schema

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
)

// A recipe's roles are written either as a struct keyed by role name (the
// catalog's form: a file adds or changes one role by unification, e.g.
// `recipes.grpo & {roles: rm: {specialization: "reward_model"}}`) or as a
// list of roles with their names (the seeds' form). Everything after
// loading sees one form, the ordered list of Recipe.Roles, and error paths
// inside stx name roles by index ("roles[1].trainable"); this file turns
// the keyed form into the list on the way in and the index back into the
// key on the way out, so that a user of either form reads their own path.

// rolesAsList rewrites a recipe's JSON so that a keyed roles struct becomes
// the list of its roles, in the order rv declares them (JSON objects, once
// decoded into Go maps, have no order; the roles' order is the recipe's:
// the sampler's default role, seeds and pools follow it).
func rolesAsList(rv cue.Value, data []byte) ([]byte, error) {
	rs := rv.LookupPath(cue.MakePath(cue.Str("roles")))
	if rs.IncompleteKind() != cue.StructKind {
		return data, nil
	}
	var names []string
	it, err := rs.Fields()
	if err != nil {
		return nil, err
	}
	for it.Next() {
		names = append(names, it.Selector().Unquoted())
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	var byName map[string]json.RawMessage
	if err := json.Unmarshal(m["roles"], &byName); err != nil {
		return nil, err
	}
	list := make([]json.RawMessage, 0, len(names))
	for _, n := range names {
		if r, ok := byName[n]; ok {
			list = append(list, r)
		}
	}
	if m["roles"], err = json.Marshal(list); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// roleKeys returns the keys of a recipe's roles in the user's files, in
// order, or nil where the recipe writes them as a list (or is not in files).
func (c *Catalog) roleKeys(recipe string) []string {
	if at := c.origin(); at != nil {
		return at.roleKeys(recipe)
	}
	uv := c.userRecipe(recipe)
	if !uv.Exists() {
		return nil
	}
	rs := uv.LookupPath(cue.MakePath(cue.Str("roles")))
	if rs.IncompleteKind() != cue.StructKind {
		return nil
	}
	it, err := rs.Fields()
	if err != nil {
		return nil
	}
	var keys []string
	for it.Next() {
		keys = append(keys, it.Selector().String())
	}
	return keys
}

// UserPath is a path relative to a recipe as its files write it: for a
// recipe whose roles are keyed by name, "roles[1].trainable" becomes
// "roles.critic.trainable". Other paths are returned as they are.
func (c *Catalog) UserPath(recipe, path string) string {
	rest, ok := strings.CutPrefix(path, "roles[")
	if !ok {
		return path
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return path
	}
	i, err := strconv.Atoi(rest[:end])
	keys := c.roleKeys(recipe)
	if err != nil || i < 0 || i >= len(keys) {
		return path
	}
	return "roles." + keys[i] + rest[end+1:]
}

// Err is an error at a path relative to a recipe: placed at the user's
// value for it and named as the user's files write it.
func (c *Catalog) Err(recipe, path, format string, args ...any) *Error {
	full := "recipes." + recipe
	if path != "" {
		full += "." + c.UserPath(recipe, path)
	}
	return &Error{Pos: c.Pos(recipe, path), Path: full, Msg: fmt.Sprintf(format, args...)}
}

// isRolesPath tells whether an error path names a recipe's roles field
// itself ("recipes.x.roles").
func isRolesPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "recipes.")
	if !ok {
		return false
	}
	_, field, ok := strings.Cut(rest, ".")
	return ok && field == "roles"
}

// keyedRoleName tells whether path is the name of a role keyed by name
// ("recipes.x.roles.policy.name") in a recipe whose user writes the key
// but not the name: the name comes from the key, so it is not missing.
func (c *Catalog) keyedRoleName(path string) bool {
	sels := cue.ParsePath(path).Selectors()
	if len(sels) != 5 || sels[0].String() != "recipes" || sels[2].String() != "roles" || sels[3].Type() != cue.StringLabel || sels[4].String() != "name" {
		return false
	}
	return c.userLookup(sels[:4]).Exists()
}

// rolesMsg rewrites a CUE error at a recipe's roles field for the form the
// user chose ("" drops it). data says the value checked is decoded data,
// where roles are always a list. both reports roles written in both forms
// (a list unified with a recipe whose roles are keyed by name).
func (c *Catalog) rolesMsg(msg, path string, data bool) (_ string, both bool) {
	kind := cue.ListKind
	empty := false
	if !data {
		uv := c.userLookup(cue.ParsePath(path).Selectors())
		kind = uv.IncompleteKind()
		switch kind {
		case cue.ListKind:
			n, err := uv.Len().Int64()
			empty = err == nil && n == 0
		case cue.StructKind:
			it, err := uv.Fields()
			empty = err == nil && !it.Next()
		}
	}
	if empty {
		return "must not be empty", false
	}
	if kind == cue.BottomKind {
		return "roles are a list here and keyed by name elsewhere (the built-in catalog keys its recipes' roles by name): " +
			"to change or add a role of a recipe you extend, write roles: NAME: {...}", true
	}
	t := tidy(msg)
	wantStruct := strings.HasSuffix(t, "has the wrong type: want struct")
	wantList := strings.HasSuffix(t, "has the wrong type: want list")
	switch {
	case !wantStruct && !wantList:
		return msg, false
	case kind == cue.ListKind && wantStruct, kind == cue.StructKind && wantList:
		return "", false // the other form's half of the disjunction
	case kind == cue.ListKind || kind == cue.StructKind:
		return msg, false
	}
	v, _, _ := strings.Cut(t, " has the wrong type")
	return v + " has the wrong type: want a struct of roles keyed by name, or a list of roles", false
}

// walkRoles reports the unknown fields of each role, in either form.
func (c *Catalog) walkRoles(v cue.Value, path string) List {
	if !c.roleDef.Exists() {
		return nil
	}
	var errs List
	switch v.IncompleteKind() {
	case cue.StructKind:
		it, err := v.Fields()
		if err != nil {
			return nil
		}
		for it.Next() {
			errs = append(errs, c.walkAllowed(it.Value(), c.roleDef, path+"."+it.Selector().String())...)
		}
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return nil
		}
		for i := 0; it.Next(); i++ {
			errs = append(errs, c.walkAllowed(it.Value(), c.roleDef, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return errs
}

// keyedRoleErrors replaces the errors under a recipe's roles, where the
// user keys them by name, with those of each role checked on its own. CUE
// reports one failing branch of the list-or-struct disjunction with only
// its first error; each role against #Role gives all of them.
func (c *Catalog) keyedRoleErrors(name, prefix string, errs List) List {
	rolesPath := prefix + ".roles"
	uv := c.userRecipe(name).LookupPath(cue.MakePath(cue.Str("roles")))
	if !c.roleDef.Exists() || uv.IncompleteKind() != cue.StructKind {
		return errs
	}
	it, err := uv.Fields()
	if err != nil {
		return errs
	}
	var roles List
	for it.Next() {
		key := it.Selector()
		u := c.roleDef.FillPath(cue.MakePath(cue.Str("name")), key.Unquoted()).Unify(it.Value())
		if err := u.Validate(cue.Concrete(true)); err != nil {
			for _, e := range c.convert(err, rolesPath+"."+key.String()) {
				if !strings.HasSuffix(e.Msg, "field not allowed") {
					roles = append(roles, e)
				}
			}
		}
	}
	if len(roles) == 0 {
		return errs // the problem is elsewhere, or the roles field itself
	}
	kept := errs[:0:0]
	for _, e := range errs {
		if !pathHasPrefix(e.Path, rolesPath) || e.Path == rolesPath {
			kept = append(kept, e)
		}
	}
	return append(kept, roles...)
}
