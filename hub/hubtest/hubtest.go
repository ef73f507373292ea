// Package hubtest serves a fake Hugging Face Hub on loopback for tests: the
// parts of the Hub's HTTP API that package hub uses (revision info, tree
// listings with pages, resolve with HEAD and GET), LFS files redirected to a
// second server standing for the CDN, gated repositories, the Hub's error
// codes, and faults on demand (a body cut halfway, a corrupted file). It
// records every request, so that tests can check what was sent where.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// File is one file of a commit.
type File struct {
	Path string
	Data []byte
}

// lfs reports whether a file is stored with LFS (served through the CDN), as
// the .gitattributes of Hub repositories make weights and data files.
func lfs(p string) bool {
	for _, ext := range []string{".safetensors", ".parquet", ".model", ".bin", ".arrow"} {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

// Request is one request a server received.
type Request struct {
	Server string // "hub" or "cdn"
	Method string
	Path   string // escaped
	Auth   string // the Authorization header
	Range  string
}

type repo struct {
	commits map[string]map[string]File // sha → path → file
	refs    map[string]string          // branch or tag → sha
	token   string
}

// Server is a fake Hub and its CDN.
type Server struct {
	Hub, CDN *httptest.Server
	// PageSize, when > 0, cuts tree listings into pages of that many entries
	// linked by the Link header, as the Hub does with 1000.
	PageSize int

	mu      sync.Mutex
	repos   map[string]*repo // "model/ns/name" → repo
	blobs   map[string][]byte
	log     []Request
	cut     map[string]int  // file key → bodies still to cut
	corrupt map[string]bool // file key → serve corrupted bytes
	serial  int
}

// New starts a fake hub and its CDN (two loopback servers, on two ports).
func New() *Server {
	s := &Server{repos: map[string]*repo{}, blobs: map[string][]byte{}, cut: map[string]int{}, corrupt: map[string]bool{}}
	s.Hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.CDN = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	return s
}

// URL is the hub's address, for HF_ENDPOINT.
func (s *Server) URL() string { return s.Hub.URL }

// Close stops both servers.
func (s *Server) Close() {
	s.Hub.Close()
	s.CDN.Close()
}

func key(kind, id string) string { return kind + "/" + id }

// Commit adds a commit holding files to repository id of kind ("model" or
// "dataset"), creating the repository, and points branch at it. It returns the
// commit's sha.
func (s *Server) Commit(kind, id, branch string, files []File) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[key(kind, id)]
	if r == nil {
		r = &repo{commits: map[string]map[string]File{}, refs: map[string]string{}}
		s.repos[key(kind, id)] = r
	}
	s.serial++
	h := sha1.New()
	fmt.Fprintf(h, "%s %s %s %d\n", kind, id, branch, s.serial)
	c := map[string]File{}
	for _, f := range files {
		c[f.Path] = File{Path: f.Path, Data: append([]byte(nil), f.Data...)}
		fmt.Fprintf(h, "%s %x\n", f.Path, sha256.Sum256(f.Data))
		if lfs(f.Path) {
			sum := sha256.Sum256(f.Data)
			s.blobs[hex.EncodeToString(sum[:])] = c[f.Path].Data
		}
	}
	sha := hex.EncodeToString(h.Sum(nil))
	r.commits[sha] = c
	r.refs[branch] = sha
	return sha
}

// RequireToken makes repository id answer only requests with "Authorization:
// Bearer token": 401 without one, 403 with another (X-Error-Code GatedRepo).
func (s *Server) RequireToken(kind, id, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[key(kind, id)].token = token
}

// CutNext makes the next n bodies of file p (hub or CDN) stop halfway, the
// connection closed.
func (s *Server) CutNext(kind, id, p string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut[key(kind, id)+"/"+p] = n
}

// Corrupt makes file p served with its first byte changed (its etag unchanged).
func (s *Server) Corrupt(kind, id, p string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corrupt[key(kind, id)+"/"+p] = on
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Reset forgets the requests received so far.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

func (s *Server) record(server string, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, Request{Server: server, Method: r.Method, Path: r.URL.EscapedPath(),
		Auth: r.Header.Get("Authorization"), Range: r.Header.Get("Range")})
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// segments splits an escaped path into unescaped segments.
func segments(escaped string) ([]string, bool) {
	parts := strings.Split(strings.Trim(escaped, "/"), "/")
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

func (s *Server) serveHub(w http.ResponseWriter, req *http.Request) {
	s.record("hub", req)
	segs, ok := segments(req.URL.EscapedPath())
	if !ok {
		hubError(w, 400, "", "bad path")
		return
	}
	switch {
	case len(segs) >= 5 && segs[0] == "api" && (segs[1] == "models" || segs[1] == "datasets"):
		kind := strings.TrimSuffix(segs[1], "s")
		id := segs[2] + "/" + segs[3]
		r, sha, ok := s.lookup(w, req, kind, id, segs[5:])
		if !ok {
			return
		}
		switch segs[4] {
		case "revision":
			s.serveInfo(w, id, sha, r)
		case "tree":
			s.serveTree(w, req, sha, r, strings.Join(segs[6:], "/"))
		default:
			hubError(w, 404, "", "no such API")
		}
	default:
		kind := "model"
		if len(segs) > 0 && segs[0] == "datasets" {
			kind, segs = "dataset", segs[1:]
		}
		if len(segs) < 5 || segs[2] != "resolve" {
			hubError(w, 404, "", "not found")
			return
		}
		id := segs[0] + "/" + segs[1]
		r, sha, ok := s.lookup(w, req, kind, id, segs[3:])
		if !ok {
			return
		}
		s.serveResolve(w, req, kind, id, sha, r, strings.Join(segs[4:], "/"))
	}
}

// lookup finds the repository and the commit its revision segment (rest[0]) names,
// answering the Hub's errors itself.
func (s *Server) lookup(w http.ResponseWriter, req *http.Request, kind, id string, rest []string) (map[string]File, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[key(kind, id)]
	if r == nil {
		hubError(w, 404, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	if r.token != "" {
		switch auth := req.Header.Get("Authorization"); auth {
		case "Bearer " + r.token:
		case "":
			hubError(w, 401, "GatedRepo", fmt.Sprintf("Access to %s %s is restricted. You must have access to it and be authenticated to access it.", kind, id))
			return nil, "", false
		default:
			hubError(w, 403, "GatedRepo", fmt.Sprintf("Access to %s %s is restricted and you are not in the authorized list.", kind, id))
			return nil, "", false
		}
	}
	if len(rest) == 0 || rest[0] == "" {
		hubError(w, 400, "", "no revision")
		return nil, "", false
	}
	rev := rest[0]
	sha, ok := r.refs[rev]
	if !ok {
		if _, isCommit := r.commits[rev]; isCommit {
			sha, ok = rev, true
		}
	}
	if !ok {
		hubError(w, 404, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return r.commits[sha], sha, true
}

func (s *Server) serveInfo(w http.ResponseWriter, id, sha string, files map[string]File) {
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	var sib []sibling
	for _, p := range sortedPaths(files) {
		sib = append(sib, sibling{p})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "sha": sha, "siblings": sib, "private": false})
}

func sortedPaths(files map[string]File) []string {
	var ps []string
	for p := range files {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

func gitOID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Server) serveTree(w http.ResponseWriter, req *http.Request, sha string, files map[string]File, dir string) {
	type lfsInfo struct {
		OID         string `json:"oid"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type entry struct {
		Type string   `json:"type"`
		OID  string   `json:"oid"`
		Size int      `json:"size"`
		Path string   `json:"path"`
		LFS  *lfsInfo `json:"lfs,omitempty"`
	}
	recursive := req.URL.Query().Get("recursive") == "true" || req.URL.Query().Get("recursive") == "True"
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	var out []entry
	seenDir := map[string]bool{}
	found := dir == ""
	for _, p := range sortedPaths(files) {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			if p == dir {
				hubError(w, 400, "", dir+" is a file")
				return
			}
			continue
		}
		found = true
		if sub, _, nested := strings.Cut(rest, "/"); nested && !recursive {
			if !seenDir[sub] {
				seenDir[sub] = true
				out = append(out, entry{Type: "directory", OID: gitOID([]byte(prefix + sub)), Path: prefix + sub})
			}
			continue
		}
		f := files[p]
		e := entry{Type: "file", OID: gitOID(f.Data), Size: len(f.Data), Path: p}
		if lfs(p) {
			sum := sha256.Sum256(f.Data)
			e.LFS = &lfsInfo{OID: hex.EncodeToString(sum[:]), Size: len(f.Data), PointerSize: 134}
		}
		out = append(out, e)
	}
	if !found {
		hubError(w, 404, "EntryNotFound", fmt.Sprintf("%s does not exist on %q", dir, sha))
		return
	}
	if s.PageSize > 0 {
		start, _ := strconv.Atoi(req.URL.Query().Get("cursor"))
		start = min(max(start, 0), len(out))
		end := min(start+s.PageSize, len(out))
		if end < len(out) {
			next := *req.URL
			q := next.Query()
			q.Set("cursor", strconv.Itoa(end))
			next.RawQuery = q.Encode()
			w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, s.Hub.URL, next.RequestURI()))
		}
		out = out[start:end]
	}
	if out == nil {
		out = []entry{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) serveResolve(w http.ResponseWriter, req *http.Request, kind, id, sha string, files map[string]File, p string) {
	f, ok := files[p]
	w.Header().Set("X-Repo-Commit", sha)
	if !ok {
		hubError(w, 404, "EntryNotFound", fmt.Sprintf("%s does not exist on %q", p, sha))
		return
	}
	if lfs(p) {
		sum := sha256.Sum256(f.Data)
		etag := hex.EncodeToString(sum[:])
		w.Header().Set("ETag", `"`+gitOID(f.Data)+`"`)
		w.Header().Set("X-Linked-Etag", `"`+etag+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		loc := fmt.Sprintf("%s/blob/%s?repo=%s&file=%s&X-Amz-Signature=fake", s.CDN.URL, etag,
			url.QueryEscape(key(kind, id)), url.QueryEscape(p))
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitOID(f.Data)+`"`)
	s.serveBytes(w, req, key(kind, id)+"/"+p, f.Data)
}

func (s *Server) serveCDN(w http.ResponseWriter, req *http.Request) {
	s.record("cdn", req)
	segs, ok := segments(req.URL.EscapedPath())
	if !ok || len(segs) != 2 || segs[0] != "blob" {
		http.NotFound(w, req)
		return
	}
	s.mu.Lock()
	data, ok := s.blobs[segs[1]]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, req)
		return
	}
	s.serveBytes(w, req, req.URL.Query().Get("repo")+"/"+req.URL.Query().Get("file"), data)
}

// serveBytes answers a HEAD or a GET of data, with "Range: bytes=N-" and the faults
// set for the file.
func (s *Server) serveBytes(w http.ResponseWriter, req *http.Request, fileKey string, data []byte) {
	s.mu.Lock()
	if s.corrupt[fileKey] && len(data) > 0 {
		data = append([]byte(nil), data...)
		data[0] ^= 0xff
	}
	cut := false
	if req.Method == http.MethodGet && s.cut[fileKey] > 0 {
		s.cut[fileKey]--
		cut = true
	}
	s.mu.Unlock()
	w.Header().Set("Accept-Ranges", "bytes")
	body := data
	status := http.StatusOK
	if rg := req.Header.Get("Range"); rg != "" && req.Method == http.MethodGet {
		from, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || !strings.HasSuffix(rg, "-") || from < 0 || from >= len(data) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(data)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		body = data[from:]
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, len(data)-1, len(data)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if req.Method == http.MethodHead {
		return
	}
	if cut {
		_, _ = w.Write(body[:len(body)/2])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		panic(http.ErrAbortHandler) // closes the connection mid-body
	}
	_, _ = w.Write(body)
}

// DirFiles reads every regular file under dir (symbolic links followed) as
// the files of a commit, with slash-separated paths.
func DirFiles(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: path.Clean(filepath.ToSlash(rel)), Data: data})
		return nil
	})
	return files, err
}
