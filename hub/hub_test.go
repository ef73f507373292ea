package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"stx.dev/stx/hub/hubtest"
)

// modelFiles of a small model: what stx downloads and what it leaves.
func testModel(weights int) []hubtest.File {
	w := bytes.Repeat([]byte("weights!"), weights)
	return []hubtest.File{
		{Path: "config.json", Data: []byte(`{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}`)},
		{Path: "generation_config.json", Data: []byte(`{"eos_token_id": [1, 2]}`)},
		{Path: "tokenizer.json", Data: []byte(`{"model": {"type": "BPE"}}`)},
		{Path: "tokenizer_config.json", Data: []byte(`{"chat_template": "{{ messages }}"}`)},
		{Path: "model.safetensors", Data: w},
		{Path: "README.md", Data: []byte("# a model\n")},
		{Path: "pytorch_model.bin", Data: []byte("not read")},
		{Path: "onnx/model.onnx", Data: []byte("not read")},
	}
}

// newClient is a client of the fake hub with a fresh cache, no retries wait.
func newClient(t *testing.T, s *hubtest.Server) *Client {
	t.Helper()
	c := &Client{Endpoint: s.URL(), Cache: filepath.Join(t.TempDir(), "hub"), Retries: 2, Backoff: time.Millisecond}
	c.Progress = func(format string, args ...any) { t.Logf("progress: "+strings.TrimSuffix(format, "\n"), args...) }
	return c
}

func fakeHub(t *testing.T) *hubtest.Server {
	s := hubtest.New()
	t.Cleanup(s.Close)
	return s
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestModelDownloadCacheLayout(t *testing.T) {
	s := fakeHub(t)
	files := testModel(1000)
	sha := s.Commit("model", "org/tiny", "main", files)
	c := newClient(t, s)
	ctx := context.Background()
	dir, err := c.Model(ctx, "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	storage := filepath.Join(c.Cache, "models--org--tiny")
	if want := filepath.Join(storage, "snapshots", sha); dir != want {
		t.Fatalf("snapshot dir %s, want %s", dir, want)
	}
	if got := string(read(t, filepath.Join(storage, "refs", "main"))); got != sha {
		t.Errorf("refs/main = %q, want %q", got, sha)
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		wanted := f.Path != "README.md" && f.Path != "pytorch_model.bin" && f.Path != "onnx/model.onnx"
		st, err := os.Lstat(p)
		if !wanted {
			if err == nil {
				t.Errorf("%s was downloaded", f.Path)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		if st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is not a symbolic link", f.Path)
		}
		target, _ := os.Readlink(p)
		etag := filepath.Base(target)
		if f.Path == "model.safetensors" && etag != sha256Hex(f.Data) {
			t.Errorf("LFS blob %s, want its sha256 %s", etag, sha256Hex(f.Data))
		}
		if want := filepath.Join("..", "..", "blobs", etag); target != want {
			t.Errorf("%s -> %s, want %s", f.Path, target, want)
		}
		if !bytes.Equal(read(t, p), f.Data) {
			t.Errorf("%s: wrong contents", f.Path)
		}
	}
	left, _ := filepath.Glob(filepath.Join(storage, "blobs", "*.incomplete"))
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}

	// A second resolve is a cache hit: no request at all, by branch or by commit.
	s.Reset()
	for _, rev := range []string{"", "main", sha} {
		again, err := c.Model(ctx, "org/tiny", rev)
		if err != nil || again != dir {
			t.Fatalf("revision %q: %v, %s", rev, err, again)
		}
	}
	if r := s.Requests(); len(r) != 0 {
		t.Errorf("cache hits made %d requests: %+v", len(r), r)
	}
}

func TestShardedModel(t *testing.T) {
	s := fakeHub(t)
	files := []hubtest.File{
		{Path: "config.json", Data: []byte(`{}`)},
		{Path: "model.safetensors.index.json", Data: []byte(`{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}`)},
		{Path: "model-00001-of-00002.safetensors", Data: []byte("shard one")},
		{Path: "model-00002-of-00002.safetensors", Data: []byte("shard two")},
		{Path: "consolidated.safetensors", Data: []byte("mistral's own format")},
	}
	s.Commit("model", "org/sharded", "main", files)
	c := newClient(t, s)
	dir, err := c.Model(context.Background(), "org/sharded", "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files[:4] {
		if !bytes.Equal(read(t, filepath.Join(dir, f.Path)), f.Data) {
			t.Errorf("%s: wrong contents", f.Path)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "consolidated.safetensors")); err == nil {
		t.Error("consolidated.safetensors was downloaded beside the index's shards")
	}
	// A snapshot missing a shard is not complete.
	if err := os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors")); err != nil {
		t.Fatal(err)
	}
	s.Reset()
	if _, err := c.Model(context.Background(), "org/sharded", "main"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range s.Requests() {
		got = append(got, r.Server+" "+r.Method+" "+r.Path)
	}
	if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "model-00002-of-00002.safetensors") {
		t.Errorf("the missing shard was not fetched again: %v", got)
	}
}

func TestTokenNotSentToCDN(t *testing.T) {
	s := fakeHub(t)
	s.Commit("model", "org/gated", "main", testModel(100))
	s.RequireToken("model", "org/gated", "hf_secret")
	c := newClient(t, s)
	ctx := context.Background()

	_, err := c.Model(ctx, "org/gated", "")
	if !errors.Is(err, ErrAccess) {
		t.Fatalf("without a token: %v, want ErrAccess", err)
	}
	for _, want := range []string{"model org/gated", "401", "token with access", "HF_TOKEN"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	c.Token = "hf_wrong"
	if _, err = c.Model(ctx, "org/gated", ""); !errors.Is(err, ErrAccess) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "has no access") {
		t.Fatalf("with a wrong token: %v", err)
	}

	c.Token = "hf_secret"
	s.Reset()
	dir, err := c.Model(ctx, "org/gated", "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(dir, "model.safetensors")), bytes.Repeat([]byte("weights!"), 100)) {
		t.Error("wrong weights")
	}
	cdn := 0
	for _, r := range s.Requests() {
		switch r.Server {
		case "hub":
			if r.Auth != "Bearer hf_secret" {
				t.Errorf("hub request %s %s without the token (%q)", r.Method, r.Path, r.Auth)
			}
		case "cdn":
			cdn++
			if r.Auth != "" {
				t.Errorf("the token went to the CDN: %s %s with %q", r.Method, r.Path, r.Auth)
			}
		}
	}
	if cdn == 0 {
		t.Error("the LFS file did not come from the CDN")
	}
}

func TestRepoAndRevisionNotFound(t *testing.T) {
	s := fakeHub(t)
	s.Commit("model", "org/tiny", "main", testModel(10))
	c := newClient(t, s)
	ctx := context.Background()
	_, err := c.Model(ctx, "org/missing", "")
	if !errors.Is(err, ErrRepoNotFound) || !strings.Contains(err.Error(), "model org/missing") || !strings.Contains(err.Error(), "repository not found") {
		t.Errorf("missing repo: %v", err)
	}
	_, err = c.Model(ctx, "org/tiny", "v9")
	if !errors.Is(err, ErrRevisionNotFound) || !strings.Contains(err.Error(), `revision "v9" not found`) {
		t.Errorf("missing revision: %v", err)
	}
	_, err = c.Files(ctx, Path{Kind: Model, Repo: "org/tiny", File: "nope.json"})
	if !errors.Is(err, ErrEntryNotFound) || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := c.Model(ctx, "not an id", ""); err == nil || !strings.Contains(err.Error(), "namespace/name") {
		t.Errorf("bad id: %v", err)
	}
	// A repository without safetensors weights is refused by name.
	s.Commit("model", "org/binonly", "main", []hubtest.File{{Path: "config.json", Data: []byte("{}")}, {Path: "pytorch_model.bin", Data: []byte("x")}})
	if _, err := c.Model(ctx, "org/binonly", ""); err == nil || !strings.Contains(err.Error(), "no safetensors weights") {
		t.Errorf("bin-only model: %v", err)
	}
}

func TestInterruptedDownloadResumes(t *testing.T) {
	s := fakeHub(t)
	files := testModel(5000)
	s.Commit("model", "org/tiny", "main", files)
	weights := files[4].Data

	// Within one call: the body is cut halfway, the retry asks for the rest.
	s.CutNext("model", "org/tiny", "model.safetensors", 1)
	c := newClient(t, s)
	dir, err := c.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(dir, "model.safetensors")), weights) {
		t.Fatal("resumed file differs")
	}
	var ranges []string
	for _, r := range s.Requests() {
		if r.Server == "cdn" && r.Method == "GET" {
			ranges = append(ranges, r.Range)
		}
	}
	if want := []string{"", fmt.Sprintf("bytes=%d-", len(weights)/2)}; !slices.Equal(ranges, want) {
		t.Errorf("CDN GETs with ranges %q, want %q", ranges, want)
	}

	// Across processes: a run without retries fails and keeps the part; the next resumes it.
	s.Reset()
	s.CutNext("model", "org/tiny", "model.safetensors", 1)
	c = newClient(t, s)
	c.Retries = 0
	if _, err := c.Model(context.Background(), "org/tiny", ""); err == nil || !strings.Contains(err.Error(), "resumes") {
		t.Fatalf("cut download: %v", err)
	}
	inc := filepath.Join(c.Cache, "models--org--tiny", "blobs", sha256Hex(weights)+".incomplete")
	if st, err := os.Stat(inc); err != nil || st.Size() != int64(len(weights)/2) {
		t.Fatalf("partial blob: %v, %v", st, err)
	}
	s.Reset()
	dir, err = c.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(dir, "model.safetensors")), weights) {
		t.Fatal("resumed file differs")
	}
	ranges = nil
	for _, r := range s.Requests() {
		if r.Server == "cdn" && r.Method == "GET" {
			ranges = append(ranges, r.Range)
		}
	}
	if want := []string{fmt.Sprintf("bytes=%d-", len(weights)/2)}; !slices.Equal(ranges, want) {
		t.Errorf("second run: CDN GETs with ranges %q, want %q", ranges, want)
	}
}

func TestInterruptedDownloadLeavesNoSnapshot(t *testing.T) {
	s := fakeHub(t)
	files := testModel(100)
	sha := s.Commit("model", "org/tiny", "main", files)
	s.CutNext("model", "org/tiny", "model.safetensors", 1)
	c := newClient(t, s)
	c.Retries = 0
	if _, err := c.Model(context.Background(), "org/tiny", ""); err == nil {
		t.Fatal("no error")
	}
	// config.json came first but is linked only once every file is there.
	if _, err := os.Lstat(filepath.Join(c.SnapshotDir(Model, "org/tiny", sha), "config.json")); err == nil {
		t.Error("an interrupted download left config.json in the snapshot")
	}
	c.Offline = true
	if _, err := c.Model(context.Background(), "org/tiny", ""); !errors.Is(err, ErrOffline) {
		t.Errorf("offline after an interrupted download: %v", err)
	}
}

func TestCorruptedBlobRefused(t *testing.T) {
	s := fakeHub(t)
	files := testModel(100)
	sha := s.Commit("model", "org/tiny", "main", files)
	s.Corrupt("model", "org/tiny", "model.safetensors", true)
	c := newClient(t, s)
	_, err := c.Model(context.Background(), "org/tiny", "")
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("corrupted blob: %v", err)
	}
	blobs := filepath.Join(c.Cache, "models--org--tiny", "blobs")
	etag := sha256Hex(files[4].Data)
	for _, p := range []string{filepath.Join(blobs, etag), filepath.Join(blobs, etag+".incomplete"), filepath.Join(c.SnapshotDir(Model, "org/tiny", sha), "model.safetensors")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is there after a corrupted download", p)
		}
	}
	s.Corrupt("model", "org/tiny", "model.safetensors", false)
	dir, err := c.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(t, filepath.Join(dir, "model.safetensors")), files[4].Data) {
		t.Error("wrong weights")
	}
}

func TestOffline(t *testing.T) {
	s := fakeHub(t)
	s.Commit("model", "org/tiny", "main", testModel(10))
	c := newClient(t, s)
	c.Offline = true
	_, err := c.Model(context.Background(), "org/tiny", "")
	if !errors.Is(err, ErrOffline) {
		t.Fatalf("offline, empty cache: %v", err)
	}
	for _, want := range []string{"model org/tiny", "HF_HUB_OFFLINE", "stx pull org/tiny", c.Cache} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if r := s.Requests(); len(r) != 0 {
		t.Errorf("offline client made requests: %+v", r)
	}
	c.Offline = false
	dir, err := c.Model(context.Background(), "org/tiny", "")
	if err != nil {
		t.Fatal(err)
	}
	c.Offline = true
	s.Reset()
	for _, pull := range []bool{false, true} {
		var got string
		if pull {
			got, err = c.PullModel(context.Background(), "org/tiny", "main")
		} else {
			got, err = c.Model(context.Background(), "org/tiny", "main")
		}
		if err != nil || got != dir {
			t.Errorf("offline, cached (pull %v): %v, %s", pull, err, got)
		}
	}
	if r := s.Requests(); len(r) != 0 {
		t.Errorf("offline client made requests: %+v", r)
	}
}

func TestRevisions(t *testing.T) {
	s := fakeHub(t)
	main1 := s.Commit("model", "org/tiny", "main", testModel(10))
	dev := s.Commit("model", "org/tiny", "v1.0", testModel(20))
	c := newClient(t, s)
	ctx := context.Background()
	d1, err := c.Model(ctx, "org/tiny", "v1.0")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(d1) != dev {
		t.Errorf("tag v1.0 resolved to %s, want %s", filepath.Base(d1), dev)
	}
	if got := string(read(t, filepath.Join(c.Cache, "models--org--tiny", "refs", "v1.0"))); got != dev {
		t.Errorf("refs/v1.0 = %q", got)
	}
	// A new commit on main: Model keeps the cached one, PullModel moves to it.
	if _, err := c.Model(ctx, "org/tiny", "main"); err != nil {
		t.Fatal(err)
	}
	main2 := s.Commit("model", "org/tiny", "main", testModel(30))
	s.Reset()
	d, err := c.Model(ctx, "org/tiny", "main")
	if err != nil || filepath.Base(d) != main1 || len(s.Requests()) != 0 {
		t.Errorf("cached main: %v, %s, %d requests", err, d, len(s.Requests()))
	}
	d, err = c.PullModel(ctx, "org/tiny", "main")
	if err != nil || filepath.Base(d) != main2 {
		t.Errorf("pulled main: %v, %s, want %s", err, d, main2)
	}
	// Files shared by the two commits are downloaded once: one blob each.
	blobs, _ := os.ReadDir(filepath.Join(c.Cache, "models--org--tiny", "blobs"))
	if len(blobs) != 4+3 { // 4 unchanged small files, 3 weights
		var names []string
		for _, b := range blobs {
			names = append(names, b.Name())
		}
		t.Errorf("%d blobs: %v", len(blobs), names)
	}
}

func testDataset() []hubtest.File {
	return []hubtest.File{
		{Path: "README.md", Data: []byte("---\nconfigs: ...\n---\n")},
		{Path: "main/train-00000-of-00002.parquet", Data: []byte("train shard 0")},
		{Path: "main/train-00001-of-00002.parquet", Data: []byte("train shard 1")},
		{Path: "main/test-00000-of-00001.parquet", Data: []byte("test shard")},
		{Path: "socratic/train-00000-of-00001.parquet", Data: []byte("other config")},
	}
}

func TestDatasetSplit(t *testing.T) {
	s := fakeHub(t)
	s.PageSize = 2 // tree listings come in pages
	sha := s.Commit("dataset", "openai/gsm8k", "main", testDataset())
	c := newClient(t, s)
	ctx := context.Background()
	files, err := c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "train")
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(c.Cache, "datasets--openai--gsm8k", "snapshots", sha)
	want := []string{filepath.Join(snap, "main", "train-00000-of-00002.parquet"), filepath.Join(snap, "main", "train-00001-of-00002.parquet")}
	if !slices.Equal(files, want) {
		t.Fatalf("files %v, want %v", files, want)
	}
	if string(read(t, files[1])) != "train shard 1" {
		t.Error("wrong contents")
	}
	target, _ := os.Readlink(files[0])
	if !strings.HasPrefix(target, filepath.Join("..", "..", "..", "blobs")+string(filepath.Separator)) {
		t.Errorf("nested file links to %s", target)
	}
	s.Reset()
	again, err := c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "train")
	if err != nil || !slices.Equal(again, files) || len(s.Requests()) != 0 {
		t.Errorf("cache hit: %v, %v, %d requests", err, again, len(s.Requests()))
	}
	test, err := c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "test")
	if err != nil || len(test) != 1 || string(read(t, test[0])) != "test shard" {
		t.Errorf("test split: %v, %v", err, test)
	}
	// A missing shard (deleted by hand) is no cache hit.
	os.Remove(files[1])
	s.Reset()
	if again, err = c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "train"); err != nil || !slices.Equal(again, files) || len(s.Requests()) == 0 {
		t.Errorf("after losing a shard: %v, %v, %d requests", err, again, len(s.Requests()))
	}
	_, err = c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "validation")
	if err == nil || !strings.Contains(err.Error(), `split "validation" of config "main"`) || !strings.Contains(err.Error(), "train-00000-of-00002.parquet") {
		t.Errorf("missing split: %v", err)
	}
	c.Offline = true
	if got, err := c.DatasetFiles(ctx, "openai/gsm8k", "", "main", "test"); err != nil || !slices.Equal(got, test) {
		t.Errorf("offline: %v %v", err, got)
	}
	if _, err := c.DatasetFiles(ctx, "openai/gsm8k", "", "socratic", "train"); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "stx pull --dataset openai/gsm8k --config socratic --split train") {
		t.Errorf("offline, not cached: %v", err)
	}
}

func TestDatasetParquetConversion(t *testing.T) {
	s := fakeHub(t)
	s.Commit("dataset", "org/jsonl", "main", []hubtest.File{{Path: "data/train.jsonl", Data: []byte("{}\n")}})
	conv := s.Commit("dataset", "org/jsonl", ParquetRevision, []hubtest.File{
		{Path: "default/train/0000.parquet", Data: []byte("p0")},
		{Path: "default/train/0001.parquet", Data: []byte("p1")},
		{Path: "default/test/0000.parquet", Data: []byte("t0")},
	})
	c := newClient(t, s)
	ctx := context.Background()
	files, err := c.DatasetFiles(ctx, "org/jsonl", "", "", "train")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || string(read(t, files[0])) != "p0" || string(read(t, files[1])) != "p1" {
		t.Fatalf("files %v", files)
	}
	// huggingface_hub keeps the ref of refs/convert/parquet at refs/refs/convert/parquet.
	if got := string(read(t, filepath.Join(c.Cache, "datasets--org--jsonl", "refs", "refs", "convert", "parquet"))); got != conv {
		t.Errorf("ref %q, want %q", got, conv)
	}
	c.Offline = true
	if again, err := c.DatasetFiles(ctx, "org/jsonl", "", "", "train"); err != nil || !slices.Equal(again, files) {
		t.Errorf("offline: %v %v", err, again)
	}
	c.Offline = false
	// A dataset without a conversion and without Parquet files.
	s.Commit("dataset", "org/none", "main", []hubtest.File{{Path: "data.csv", Data: []byte("a,b\n")}})
	if _, err := c.DatasetFiles(ctx, "org/none", "", "", "train"); err == nil || !strings.Contains(err.Error(), "no Parquet files") || !strings.Contains(err.Error(), "refs/convert/parquet (no such branch)") {
		t.Errorf("no parquet: %v", err)
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Path
		err  string
	}{
		{in: "hf://datasets/openai/gsm8k/main/train-00000-of-00001.parquet", want: Path{Dataset, "openai/gsm8k", "", "main/train-00000-of-00001.parquet"}},
		{in: "hf://datasets/openai/gsm8k@v1.0/main/train-*.parquet", want: Path{Dataset, "openai/gsm8k", "v1.0", "main/train-*.parquet"}},
		{in: "hf://datasets/openai/gsm8k@refs/convert/parquet/main/train/0000.parquet", want: Path{Dataset, "openai/gsm8k", "refs/convert/parquet", "main/train/0000.parquet"}},
		{in: "hf://datasets/openai/gsm8k@refs%2Fconvert%2Fparquet/main/train/0000.parquet", want: Path{Dataset, "openai/gsm8k", "refs/convert/parquet", "main/train/0000.parquet"}},
		{in: "hf://datasets/org/name@refs/pr/3/data.jsonl", want: Path{Dataset, "org/name", "refs/pr/3", "data.jsonl"}},
		{in: "hf://Qwen/Qwen2.5-0.5B/config.json", want: Path{Model, "Qwen/Qwen2.5-0.5B", "", "config.json"}},
		{in: "hf://datasets/openai/gsm8k", err: "names a repository"},
		{in: "hf://datasets/openai", err: "want hf://datasets/namespace/name"},
		{in: "hf://datasets/openai/gsm8k/../x", err: "not a path inside"},
		{in: "hf://spaces/a/b/app.py", err: "not spaces"},
		{in: "hf://datasets/a/b@/x", err: "bad revision"},
	} {
		got, err := ParsePath(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestPathFiles(t *testing.T) {
	s := fakeHub(t)
	s.Commit("dataset", "openai/gsm8k", "main", testDataset())
	c := newClient(t, s)
	ctx := context.Background()
	p, _ := ParsePath("hf://datasets/openai/gsm8k/main/train-*.parquet")
	files, err := c.Files(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || string(read(t, files[0])) != "train shard 0" || string(read(t, files[1])) != "train shard 1" {
		t.Fatalf("glob: %v", files)
	}
	p, _ = ParsePath("hf://datasets/openai/gsm8k/main/test-00000-of-00001.parquet")
	one, err := c.Files(ctx, p)
	if err != nil || len(one) != 1 {
		t.Fatal(err)
	}
	s.Reset()
	if again, err := c.Files(ctx, p); err != nil || !slices.Equal(again, one) || len(s.Requests()) != 0 {
		t.Errorf("cache hit: %v, %d requests", err, len(s.Requests()))
	}
	p, _ = ParsePath("hf://datasets/openai/gsm8k/main/valid-*.parquet")
	if _, err := c.Files(ctx, p); !errors.Is(err, ErrEntryNotFound) {
		t.Errorf("glob without a match: %v", err)
	}
	c.Offline = true
	p, _ = ParsePath("hf://datasets/openai/gsm8k/main/train-*.parquet")
	if again, err := c.Files(ctx, p); err != nil || !slices.Equal(again, files) {
		t.Errorf("offline glob: %v %v", err, again)
	}
}

func TestEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_ENDPOINT", "HF_HUB_OFFLINE"} {
		t.Setenv(v, "")
	}
	if got, want := CacheDir(), filepath.Join(home, ".cache", "huggingface", "hub"); got != want {
		t.Errorf("default cache %s, want %s", got, want)
	}
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got := CacheDir(); got != "/xdg/huggingface/hub" {
		t.Errorf("XDG cache %s", got)
	}
	t.Setenv("HF_HOME", filepath.Join(home, "hf"))
	if got := CacheDir(); got != filepath.Join(home, "hf", "hub") {
		t.Errorf("HF_HOME cache %s", got)
	}
	if err := os.MkdirAll(filepath.Join(home, "hf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "hf", "token"), []byte("hf_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_HUB_CACHE", "/hubcache")
	t.Setenv("HF_HUB_OFFLINE", "1")
	t.Setenv("HF_ENDPOINT", "http://mirror.example/")
	c := FromEnv()
	if c.Cache != "/hubcache" || c.Token != "hf_fromfile" || !c.Offline || c.Endpoint != "http://mirror.example" {
		t.Errorf("FromEnv: %+v", c)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if TokenFromEnv() != "hf_env" {
		t.Error("HF_TOKEN does not win over the token file")
	}
}

func TestIsRepoID(t *testing.T) {
	for s, want := range map[string]bool{
		"Qwen/Qwen2.5-0.5B-Instruct": true, "openai/gsm8k": true, "a/b": true, "meta-llama/Llama-3.1-8B": true,
		"gpt2": false, "./a/b": false, "/abs/dir": false, "a/b/c": false, "a--b/c": false, "a/b..c": false,
		"-a/b": false, "a/b.": false, "runs/x y": false, "": false,
	} {
		if IsRepoID(s) != want {
			t.Errorf("IsRepoID(%q) = %v", s, !want)
		}
	}
}

// TestRedirectDropsToken: a redirect off the endpoint's scheme, host and port loses the
// Authorization header (Go alone keeps it for another port of the same host name).
func TestRedirectDropsToken(t *testing.T) {
	c := &Client{Endpoint: "http://127.0.0.1:8000", Token: "hf_x"}
	for u, keep := range map[string]bool{
		"http://127.0.0.1:8000/org/m/resolve/x": true,
		"http://127.0.0.1:9000/blob":            false,
		"https://127.0.0.1:8000/blob":           false,
		"http://cdn.example/blob":               false,
	} {
		req, err := c.newRequest(context.Background(), "GET", "http://127.0.0.1:8000/start")
		if err != nil {
			t.Fatal(err)
		}
		next, _ := c.newRequest(context.Background(), "GET", u)
		next.Header = req.Header.Clone()
		if err := c.redirectPolicy(next, []*http.Request{req}); err != nil {
			t.Fatal(err)
		}
		if got := next.Header.Get("Authorization") != ""; got != keep {
			t.Errorf("redirect to %s keeps the token: %v, want %v", u, got, keep)
		}
	}
	if c2 := (&Client{Endpoint: DefaultEndpoint}); !c2.sameHost(mustURL(t, "https://huggingface.co:443/x")) || c2.sameHost(mustURL(t, "https://cas-bridge.xethub.hf.co/x")) {
		t.Error("sameHost with default ports")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestConcurrentDownloads: two resolves of one model at once share the cache (the blob
// locks are huggingface_hub's): both get the whole model.
func TestConcurrentDownloads(t *testing.T) {
	s := fakeHub(t)
	files := testModel(20000)
	s.Commit("model", "org/tiny", "main", files)
	c := newClient(t, s)
	c.Progress = nil
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	errs := make([]error, 4)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := *c
			dirs[i], errs[i] = cc.PullModel(context.Background(), "org/tiny", "")
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatalf("resolve %d: %v", i, errs[i])
		}
		if !bytes.Equal(read(t, filepath.Join(dirs[i], "model.safetensors")), files[4].Data) {
			t.Errorf("resolve %d: wrong weights", i)
		}
	}
}

// TestDatasetConfigHint: a config that is not there is an error that shows the folders.
func TestDatasetConfigHint(t *testing.T) {
	s := fakeHub(t)
	s.Commit("dataset", "openai/gsm8k", "main", testDataset())
	c := newClient(t, s)
	_, err := c.PullDataset(context.Background(), "openai/gsm8k", "", "", "")
	if err == nil || !strings.Contains(err.Error(), "folders, which may be configs: main, socratic") {
		t.Errorf("missing config: %v", err)
	}
	files, err := c.PullDataset(context.Background(), "openai/gsm8k", "", "main", "")
	if err != nil || len(files) != 3 {
		t.Errorf("every split of main: %v, %v", err, files)
	}
	if root := SnapshotRoot(files[0]); filepath.Base(filepath.Dir(root)) != "snapshots" {
		t.Errorf("snapshot root %s", root)
	}
}
