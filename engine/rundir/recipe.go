package rundir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// recipeFile is recipes/v<N>.cue.
func (d *Dir) recipeFile(version int) string {
	return filepath.Join(d.path, RecipesDir, "v"+strconv.Itoa(version)+".cue")
}

// WriteRecipe records version of the resolved recipe: recipes/v<N>.cue
// keeps it for good and config.cue becomes it. Version 1 is the recipe the
// run started with; each applied hot reload adds the next. Writing a
// version again with the same text is allowed (a resumed run does); with a
// different text it is an error, since the history must not change.
func (d *Dir) WriteRecipe(version int, cueText []byte) error {
	if version < 1 {
		return fmt.Errorf("write recipe: version %d, want ≥ 1", version)
	}
	if len(bytes.TrimSpace(cueText)) == 0 {
		return fmt.Errorf("write recipe v%d: empty recipe", version)
	}
	if d.replica {
		return nil
	}
	vf := d.recipeFile(version)
	old, err := os.ReadFile(vf)
	switch {
	case err == nil && !bytes.Equal(old, cueText):
		return fmt.Errorf("write recipe: version %d is already recorded in %s with a different text", version, vf)
	case errors.Is(err, os.ErrNotExist):
		if err := writeFileAtomic(vf, cueText); err != nil {
			return fmt.Errorf("write recipe v%d: %w", version, err)
		}
	case err != nil:
		return fmt.Errorf("write recipe v%d: %w", version, err)
	}
	if err := writeFileAtomic(filepath.Join(d.path, ConfigFile), cueText); err != nil {
		return fmt.Errorf("write recipe v%d: %w", version, err)
	}
	return nil
}

// RecipeVersions lists the recorded recipe versions in increasing order.
func (d *Dir) RecipeVersions() ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(d.path, RecipesDir))
	if err != nil {
		return nil, fmt.Errorf("recipe versions: %w", err)
	}
	var vs []int
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, "v") || !strings.HasSuffix(name, ".cue") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(name[1:], ".cue"))
		if err != nil || n < 1 || "v"+strconv.Itoa(n)+".cue" != name {
			continue // not a name WriteRecipe writes (v01.cue, v-1.cue, ...)
		}
		vs = append(vs, n)
	}
	slices.Sort(vs)
	return vs, nil
}

// ReadRecipe returns the text of a recorded recipe version.
func (d *Dir) ReadRecipe(version int) ([]byte, error) {
	data, err := os.ReadFile(d.recipeFile(version))
	if err != nil {
		return nil, fmt.Errorf("read recipe v%d: %w", version, err)
	}
	return data, nil
}

// Config returns the current recipe (config.cue).
func (d *Dir) Config() ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(d.path, ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("read recipe: %w", err)
	}
	return data, nil
}
