// Package hub reads models and datasets named by their Hugging Face Hub ids
// ("Qwen/Qwen2.5-0.5B-Instruct", "openai/gsm8k") from the local Hugging Face
// cache, and downloads what is missing into that cache through the Hub's HTTP
// API.
//
// The cache is huggingface_hub's own, shared with the Python tools (transformers,
// datasets, vLLM, verl, TRL): $HF_HUB_CACHE, else $HF_HOME/hub, else
// ${XDG_CACHE_HOME:-~/.cache}/huggingface/hub, laid out as huggingface_hub
// writes it:
//
//	models--Qwen--Qwen2.5-0.5B-Instruct/
//	    refs/main                      the commit sha the branch "main" resolved to
//	    blobs/<etag>                   file contents: sha256 for LFS files, git sha1 otherwise
//	    snapshots/<sha>/config.json    -> ../../blobs/<etag> (relative symbolic links)
//	datasets--openai--gsm8k/...
//	.locks/models--.../<etag>.lock     flock(2) locks, the ones huggingface_hub takes
//
// A download asks GET {endpoint}/api/{models,datasets}/{id}/revision/{rev} for
// the commit sha and the file list, then HEAD {endpoint}/{id}/resolve/{sha}/{file}
// (datasets: {endpoint}/datasets/{id}/resolve/...) for the file's etag, size and,
// for an LFS file, the CDN address it redirects to, and GETs it into
// blobs/<etag>.incomplete, resuming a partial file with an HTTP Range request.
// An LFS blob's sha256 must equal its etag: a corrupted one is removed and
// refused. The token (HF_TOKEN) is sent to the endpoint's host only, never to
// the CDN a file redirects to.
//
// Snapshot links are made only once every file of a request is in blobs/, in
// an order such that the file checked to tell a snapshot complete (a model's
// config.json, a split's first shard) is linked last: an interrupted download
// never leaves what looks like a complete snapshot.
package hub

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Kind is a repository type of the Hub.
type Kind string

// The repository types stx reads.
const (
	Model   Kind = "model"
	Dataset Kind = "dataset"
)

// plural is the kind as the API and the cache spell it ("models", "datasets").
func (k Kind) plural() string { return string(k) + "s" }

// DefaultEndpoint is the Hub's address when $HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// DefaultRevision is the revision of a repository when none is given.
const DefaultRevision = "main"

// Client downloads from one Hub endpoint into one cache. The zero value is not
// usable: start from FromEnv.
type Client struct {
	// Endpoint is the Hub's base URL, without a trailing slash ($HF_ENDPOINT).
	Endpoint string
	// Token is sent as "Authorization: Bearer <token>" to the endpoint's host ($HF_TOKEN).
	Token string
	// Cache is the hub cache directory ($HF_HUB_CACHE, ...).
	Cache string
	// Offline reads the cache only ($HF_HUB_OFFLINE=1).
	Offline bool
	// HTTP sends the requests; nil: a client with connection and header timeouts.
	HTTP *http.Client
	// Retries is how many times a failed transfer (network error, cut body, 429, 5xx) is
	// tried again, resuming where it stopped.
	Retries int
	// Backoff is the wait before the first retry, doubled at each next one.
	Backoff time.Duration
	// Progress, when set, gets one line per file downloaded (with a trailing newline).
	Progress func(format string, args ...any)
	// UserAgent names the client to the Hub.
	UserAgent string
}

// FromEnv is a client configured as huggingface_hub configures itself from the
// environment: HF_ENDPOINT, HF_TOKEN (else the token file that `hf auth login`
// writes, $HF_TOKEN_PATH or $HF_HOME/token), the cache directory (CacheDir) and
// HF_HUB_OFFLINE.
func FromEnv() *Client {
	endpoint := strings.TrimRight(strings.TrimSpace(os.Getenv("HF_ENDPOINT")), "/")
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	return &Client{
		Endpoint:  endpoint,
		Token:     TokenFromEnv(),
		Cache:     CacheDir(),
		Offline:   envTrue("HF_HUB_OFFLINE"),
		Retries:   4,
		Backoff:   time.Second,
		UserAgent: "stx (huggingface_hub-compatible cache)",
	}
}

// envTrue reads a boolean variable as huggingface_hub does ("1", "ON", "YES", "TRUE").
func envTrue(name string) bool {
	switch strings.ToUpper(strings.TrimSpace(os.Getenv(name))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// hfHome is $HF_HOME, else ${XDG_CACHE_HOME:-~/.cache}/huggingface.
func hfHome() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return expandHome(h)
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(expandHome(base), "huggingface")
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// CacheDir is the hub cache: $HF_HUB_CACHE (or its old name $HUGGINGFACE_HUB_CACHE),
// else $HF_HOME/hub, else ${XDG_CACHE_HOME:-~/.cache}/huggingface/hub.
func CacheDir() string {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(v); d != "" {
			return expandHome(d)
		}
	}
	return filepath.Join(hfHome(), "hub")
}

// TokenFromEnv is $HF_TOKEN (or its old name $HUGGING_FACE_HUB_TOKEN), else the
// contents of the token file ($HF_TOKEN_PATH, else $HF_HOME/token), else "".
func TokenFromEnv() string {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(v)); t != "" {
			return t
		}
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		path = filepath.Join(hfHome(), "token")
	}
	if data, err := os.ReadFile(expandHome(path)); err == nil {
		return strings.TrimSpace(string(data))
	}
	return ""
}

// repoIDPattern is a Hub repository id, "namespace/name", as huggingface_hub
// validates one (letters, digits, "-", "_", "."; no "--" or ".."; neither part
// starts or ends with "-" or ".").
var repoIDPattern = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?/[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)

// IsRepoID reports whether s has the form of a Hub repository id, "namespace/name".
// Single-word ids of the Hub's first models ("gpt2") now live under a namespace
// ("openai-community/gpt2") and are not accepted.
func IsRepoID(s string) bool {
	return len(s) <= 200 && repoIDPattern.MatchString(s) && !strings.Contains(s, "--") && !strings.Contains(s, "..")
}

// CheckRepoID returns an error saying why s is not a repository id.
func CheckRepoID(s string) error {
	if IsRepoID(s) {
		return nil
	}
	return fmt.Errorf("%q is not a Hugging Face repository id: want \"namespace/name\" (letters, digits, '-', '_', '.')", s)
}

// commitPattern is a full commit sha.
var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommit reports whether rev is a full commit sha (40 hex digits).
func IsCommit(rev string) bool { return commitPattern.MatchString(rev) }

// Errors that a *Error wraps, for errors.Is.
var (
	ErrRepoNotFound     = errors.New("repository not found")
	ErrRevisionNotFound = errors.New("revision not found")
	ErrEntryNotFound    = errors.New("file not found")
	ErrAccess           = errors.New("access denied")
	ErrOffline          = errors.New("not in the cache and HF_HUB_OFFLINE is set")
	ErrCorrupt          = errors.New("corrupted download")
)

// Error is a failed request or a missing cache entry, naming the repository.
type Error struct {
	Kind     Kind
	Repo     string
	Revision string
	File     string
	Status   int    // HTTP status, 0 when no request was made
	Code     string // the Hub's X-Error-Code
	Msg      string
	Err      error // one of the Err* values, or nil
}

func (e *Error) Error() string {
	what := fmt.Sprintf("%s %s", e.Kind, e.Repo)
	if e.File != "" {
		what += ": " + e.File
	}
	return what + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// validRevision refuses a revision that could not be a ref file of the cache.
func validRevision(rev string) error {
	if rev == "" || strings.HasPrefix(rev, "/") || strings.Contains(rev, "\\") || strings.ContainsAny(rev, "\x00\n\r") {
		return fmt.Errorf("revision %q is not a branch, tag or commit sha", rev)
	}
	for _, part := range strings.Split(rev, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("revision %q is not a branch, tag or commit sha", rev)
		}
	}
	return nil
}

// validRepoPath refuses a file path (from the server or the user) that would
// leave the snapshot directory.
func validRepoPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsAny(p, "\x00") {
		return fmt.Errorf("file path %q is not a path inside a repository", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("file path %q is not a path inside a repository", p)
		}
	}
	return nil
}

// etagPattern is an etag usable as a blob file name.
var etagPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$`)

// sha256Pattern is an LFS etag: the file's sha256.
var sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
