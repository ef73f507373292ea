package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"stx.dev/stx/hub"
	"stx.dev/stx/schema"
)

// resolveModelSource turns a role's model source into what runtime.OpenModel opens. A
// built-in config or starting model name, and an existing path, are returned as they are
// (a directory named like a Hub id wins over the Hub). A Hugging Face Hub model id,
// "namespace/name", is read from the Hugging Face cache, downloaded into it when missing
// (hub.Client.Model; HF_ENDPOINT, HF_TOKEN, HF_HUB_CACHE and HF_HUB_OFFLINE apply), at
// revision (a branch, tag or commit sha; "" is "main"); its snapshot directory is
// returned. say gets a line per file downloaded (nil: stderr). Anything else is returned
// as it is, for OpenModel to report.
func resolveModelSource(ctx context.Context, source, revision string, say func(string, ...any)) (dir string, err error) {
	if source == "" || builtinModel(source) || IsStarter(source) {
		return source, nil
	}
	if _, err := os.Stat(source); err == nil {
		return source, nil
	}
	if !hub.IsRepoID(source) {
		return source, nil
	}
	c := hub.FromEnv()
	if say == nil {
		say = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "stx: "+format, args...) }
	}
	c.Progress = say
	dir, err = c.Model(ctx, source, revision)
	var he *hub.Error
	if err != nil && !errors.As(err, &he) { // a hub.Error names the model already
		err = fmt.Errorf("model %s (a Hugging Face Hub id): %w", source, err)
	}
	return dir, err
}

// roleRevision is the model.revision that goes with role i's source: its own, or, with
// model.init_from, that of the role it copies.
func roleRevision(rec *schema.Recipe, i int) string {
	r := rec.Roles[i]
	if from := r.Model.InitFrom; from != "" {
		if j := slices.IndexFunc(rec.Roles, func(x schema.Role) bool { return x.Name == from }); j >= 0 {
			return rec.Roles[j].Model.Revision
		}
	}
	return r.Model.Revision
}
