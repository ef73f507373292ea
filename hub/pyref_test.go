package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"stx.dev/stx/hub/hubtest"
	"stx.dev/stx/internal/pyref"
)

// hfhub is huggingface_hub as scripts/fetch-hfhub.sh installs it.
func hfhub(t *testing.T) pyref.Ref {
	return pyref.Require(t, "hfhub", "", "huggingface_hub/__init__.py", "fetch-hfhub.sh")
}

type pyCheck struct {
	RepoID   string            `json:"repo_id"`
	RepoType string            `json:"repo_type"`
	Revision string            `json:"revision"`
	Snapshot string            `json:"snapshot,omitempty"`
	Files    map[string]string `json:"files,omitempty"`
}

// runHFHub runs scripts/hfhub-check.py with huggingface_hub on the cache.
func runHFHub(t *testing.T, cache, endpoint string, offline bool, req map[string][]pyCheck) (downloaded []string) {
	t.Helper()
	ref := hfhub(t)
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ref.Python, filepath.Join("..", "scripts", "hfhub-check.py"))
	off := "0"
	if offline {
		off = "1"
	}
	home := t.TempDir()
	cmd.Env = ref.Env("HF_HUB_CACHE="+cache, "HF_HOME="+home, "HF_HUB_OFFLINE="+off, "HF_ENDPOINT="+endpoint,
		"HF_TOKEN=", "HF_HUB_DISABLE_TELEMETRY=1", "HF_HUB_DISABLE_PROGRESS_BARS=1", "HF_HUB_DISABLE_XET=1",
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/hfhub-check.py: %v\n%s", err, stderr.String())
	}
	var res struct {
		Errors     []string `json:"errors"`
		Downloaded []string `json:"downloaded"`
		Version    string   `json:"version"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("scripts/hfhub-check.py: %v: %s\n%s", err, out, stderr.String())
	}
	t.Logf("huggingface_hub %s", res.Version)
	for _, e := range res.Errors {
		t.Errorf("huggingface_hub: %s", e)
	}
	return res.Downloaded
}

// TestCacheMatchesHuggingfaceHub: huggingface_hub, offline, finds in stx's cache the same
// snapshots stx printed, by branch, tag and refs/convert/parquet, reads every file with
// the right contents, and scans the cache without a warning; and stx finds, without a
// request, what huggingface_hub itself downloaded from the same fake hub.
func TestCacheMatchesHuggingfaceHub(t *testing.T) {
	hfhub(t)
	s := fakeHub(t)
	s.PageSize = 3
	model := testModel(300)
	model = append(model, hubtest.File{Path: "chat_template.jinja", Data: []byte("{{ messages }}")})
	s.Commit("model", "org/tiny", "main", model)
	tagged := testModel(301)
	s.Commit("model", "org/tiny", "v1", tagged)
	sharded := []hubtest.File{
		{Path: "config.json", Data: []byte(`{}`)},
		{Path: "model.safetensors.index.json", Data: []byte(`{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`)},
		{Path: "model-00001-of-00002.safetensors", Data: []byte("shard one")},
		{Path: "model-00002-of-00002.safetensors", Data: []byte("shard two")},
	}
	s.Commit("model", "org/sharded", "main", sharded)
	s.Commit("dataset", "openai/gsm8k", "main", testDataset())
	s.Commit("dataset", "org/conv", "main", []hubtest.File{{Path: "data.csv", Data: []byte("a\n")}})
	s.Commit("dataset", "org/conv", ParquetRevision, []hubtest.File{{Path: "default/train/0000.parquet", Data: []byte("p0")}})

	c := newClient(t, s)
	ctx := context.Background()
	var checks []pyCheck
	check := func(kind Kind, id, rev, snapshot string, files []hubtest.File, paths ...string) {
		pc := pyCheck{RepoID: id, RepoType: string(kind), Revision: rev, Snapshot: snapshot, Files: map[string]string{}}
		for _, f := range files {
			for _, p := range paths {
				if f.Path == p {
					pc.Files[p] = sha256Hex(f.Data)
				}
			}
		}
		if len(pc.Files) != len(paths) {
			t.Fatalf("files %v not all in the commit", paths)
		}
		checks = append(checks, pc)
	}
	modelPaths := []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}
	dir, err := c.Model(ctx, "org/tiny", "main")
	if err != nil {
		t.Fatal(err)
	}
	check(Model, "org/tiny", "main", dir, model, append(modelPaths, "chat_template.jinja")...)
	if dir, err = c.Model(ctx, "org/tiny", "v1"); err != nil {
		t.Fatal(err)
	}
	check(Model, "org/tiny", "v1", dir, tagged, modelPaths...)
	check(Model, "org/tiny", filepath.Base(dir), dir, tagged, modelPaths...) // by commit sha
	if dir, err = c.Model(ctx, "org/sharded", ""); err != nil {
		t.Fatal(err)
	}
	check(Model, "org/sharded", "main", dir, sharded, "config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
	files, err := c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "train")
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Dir(filepath.Dir(files[0]))
	check(Dataset, "openai/gsm8k", "main", snap, testDataset(), "main/train-00000-of-00002.parquet", "main/train-00001-of-00002.parquet")
	if files, err = c.DatasetFiles(ctx, "org/conv", "", "", "train"); err != nil {
		t.Fatal(err)
	}
	check(Dataset, "org/conv", ParquetRevision, filepath.Dir(filepath.Dir(filepath.Dir(files[0]))),
		[]hubtest.File{{Path: "default/train/0000.parquet", Data: []byte("p0")}}, "default/train/0000.parquet")
	runHFHub(t, c.Cache, s.URL(), true, map[string][]pyCheck{"check": checks})

	// The other way: huggingface_hub downloads from the fake hub; stx finds it without a request.
	pyModel := testModel(77)
	s.Commit("model", "org/frompython", "main", pyModel)
	got := runHFHub(t, c.Cache, s.URL(), false, map[string][]pyCheck{"download": {{RepoID: "org/frompython", RepoType: "model", Revision: "main"}}})
	if t.Failed() {
		return
	}
	s.Reset()
	dir, err = c.Model(ctx, "org/frompython", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || filepath.Clean(got[0]) != dir {
		t.Errorf("stx found %s, huggingface_hub downloaded %v", dir, got)
	}
	if r := s.Requests(); len(r) != 0 {
		t.Errorf("stx made %d requests for a model huggingface_hub had downloaded: %+v", len(r), r)
	}
	if !bytes.Equal(read(t, filepath.Join(dir, "model.safetensors")), pyModel[4].Data) {
		t.Error("wrong weights")
	}
}
