package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxAPIBody bounds an API answer (a repository's file list).
const maxAPIBody = 64 << 20

// httpClient is c.HTTP, or a client whose connections and response headers
// time out (a body may take as long as it takes: the context ends it). It
// follows redirects only as far as redirectPolicy allows.
func (c *Client) httpClient() *http.Client {
	base := c.HTTP
	if base == nil {
		base = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			MaxIdleConnsPerHost:   4,
		}}
	}
	hc := *base
	hc.CheckRedirect = c.redirectPolicy
	return &hc
}

// redirectPolicy follows at most 10 redirects and drops the Authorization
// header as soon as a redirect leaves the endpoint's host (scheme, host and
// port): Go's own rule keeps it for another port of the same host name.
func (c *Client) redirectPolicy(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if !c.sameHost(req.URL) {
		req.Header.Del("Authorization")
	}
	return nil
}

// sameHost reports whether u is on the endpoint's scheme, host and port.
func (c *Client) sameHost(u *url.URL) bool {
	e, err := url.Parse(c.Endpoint)
	if err != nil {
		return false
	}
	return strings.EqualFold(e.Scheme, u.Scheme) && strings.EqualFold(hostPort(e), hostPort(u))
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return u.Hostname() + ":443"
	case "http":
		return u.Hostname() + ":80"
	}
	return u.Host
}

// newRequest builds a request with the token when it goes to the endpoint's host.
func (c *Client) newRequest(ctx context.Context, method, rawURL string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" && c.sameHost(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	// The real size of the file, not a compressed transfer of it.
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

// retryable marks an error worth another attempt: a network error, a body cut
// short, 429 or a 5xx.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

func isRetryable(err error) bool {
	var r retryable
	return errors.As(err, &r)
}

// withRetries runs f until it succeeds, fails for good, or has been tried
// 1+c.Retries times, waiting c.Backoff (doubled each time) in between.
func (c *Client) withRetries(ctx context.Context, what string, f func() error) error {
	wait := c.Backoff
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !isRetryable(err) || attempt >= c.Retries || ctx.Err() != nil {
			return err
		}
		c.say("%s: %v; trying again (%d of %d)\n", what, err, attempt+1, c.Retries)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (c *Client) say(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(format, args...)
	}
}

// do sends req, making network errors retryable.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, req.Context().Err()
		}
		return nil, retryable{fmt.Errorf("%s %s: %w", req.Method, bare(req.URL), stripURLs(err))}
	}
	return resp, nil
}

// statusError turns a failed response into an *Error naming r, rev and file,
// after the Hub's X-Error-Code header (RepoNotFound, RevisionNotFound,
// EntryNotFound, GatedRepo) and status.
func (c *Client) statusError(resp *http.Response, r repo, rev, file string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" && resp.Request != nil && resp.Request.Method != http.MethodHead {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		var js struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &js) == nil && js.Error != "" {
			msg = js.Error
		} else {
			msg = strings.TrimSpace(string(body))
		}
	}
	e := &Error{Kind: r.kind, Repo: r.id, Revision: rev, File: file, Status: resp.StatusCode, Code: code}
	detail := ""
	if msg != "" {
		detail = ": " + strings.TrimSuffix(msg, ".")
	}
	page := c.Endpoint + "/" + r.id
	if r.kind == Dataset {
		page = c.Endpoint + "/datasets/" + r.id
	}
	tokenHint := "set HF_TOKEN to a token that has access to it"
	if c.Token != "" {
		tokenHint = "the token given (HF_TOKEN) has no access to it: use one that has"
	}
	switch {
	case code == "GatedRepo" || (resp.StatusCode == 401 || resp.StatusCode == 403) && code != "RepoNotFound" && code != "RevisionNotFound" && code != "EntryNotFound":
		e.Err = ErrAccess
		e.Msg = fmt.Sprintf("access denied by %s (HTTP %d%s): the repository is gated or private and a token with access is needed: accept its terms at %s if it asks, then %s",
			c.Endpoint, resp.StatusCode, detail, page, tokenHint)
	case code == "RepoNotFound":
		e.Err = ErrRepoNotFound
		e.Msg = fmt.Sprintf("repository not found on %s (HTTP %d%s): check the id; a private or gated repository needs a token: %s",
			c.Endpoint, resp.StatusCode, detail, tokenHint)
	case code == "RevisionNotFound":
		e.Err = ErrRevisionNotFound
		e.Msg = fmt.Sprintf("revision %q not found (HTTP %d%s): give a branch, tag or commit sha of the repository", rev, resp.StatusCode, detail)
	case code == "EntryNotFound" || resp.StatusCode == 404 && file != "":
		e.Err = ErrEntryNotFound
		e.Msg = fmt.Sprintf("not found at revision %s (HTTP %d%s)", rev, resp.StatusCode, detail)
	case resp.StatusCode == 404:
		e.Err = ErrRepoNotFound
		e.Msg = fmt.Sprintf("not found on %s (HTTP 404%s)", c.Endpoint, detail)
	default:
		e.Msg = fmt.Sprintf("HTTP %d from %s%s", resp.StatusCode, bare(resp.Request.URL), detail)
		if resp.StatusCode == 429 || resp.StatusCode >= 500 {
			return retryable{e}
		}
	}
	return e
}

// apiURL is {endpoint}/api/{kind}s/{id}/{parts...}.
func (c *Client) apiURL(r repo, parts ...string) string {
	return c.Endpoint + "/api/" + r.kind.plural() + "/" + r.id + "/" + strings.Join(parts, "/")
}

// getJSON GETs an API URL into v, with retries.
func (c *Client) getJSON(ctx context.Context, r repo, rev, file, rawURL string, v any) (next string, err error) {
	err = c.withRetries(ctx, r.String(), func() error {
		req, err := c.newRequest(ctx, http.MethodGet, rawURL)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := c.do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return c.statusError(resp, r, rev, file)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
		if err != nil {
			return retryable{fmt.Errorf("GET %s: %w", rawURL, err)}
		}
		if len(body) > maxAPIBody {
			return fmt.Errorf("GET %s: answer larger than %d MiB", rawURL, maxAPIBody>>20)
		}
		if err := json.Unmarshal(body, v); err != nil {
			return fmt.Errorf("GET %s: not the Hub API's JSON (is HF_ENDPOINT a Hugging Face Hub?): %w", rawURL, err)
		}
		next = nextLink(resp.Header.Get("Link"))
		return nil
	})
	return next, err
}

// nextLink is the rel="next" URL of a Link header ("<url>; rel=\"next\"").
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		fields := strings.Split(part, ";")
		if len(fields) < 2 {
			continue
		}
		u := strings.Trim(strings.TrimSpace(fields[0]), "<>")
		for _, f := range fields[1:] {
			if strings.ReplaceAll(strings.TrimSpace(f), " ", "") == `rel="next"` {
				return u
			}
		}
	}
	return ""
}

// repoInfo is the answer of GET /api/{kind}s/{id}/revision/{rev}.
type repoInfo struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// files are the repository paths the info lists.
func (i *repoInfo) files() []string {
	out := make([]string, 0, len(i.Siblings))
	for _, s := range i.Siblings {
		out = append(out, s.RFilename)
	}
	return out
}

// info asks the Hub which commit rev is and which files it holds.
func (c *Client) info(ctx context.Context, r repo, rev string) (*repoInfo, error) {
	var info repoInfo
	if _, err := c.getJSON(ctx, r, rev, "", c.apiURL(r, "revision", url.PathEscape(rev)), &info); err != nil {
		return nil, err
	}
	if !IsCommit(info.SHA) {
		return nil, &Error{Kind: r.kind, Repo: r.id, Revision: rev, Msg: fmt.Sprintf("the Hub's answer for revision %q has no commit sha (got %q)", rev, info.SHA)}
	}
	return &info, nil
}

// treeEntry is one entry of GET /api/{kind}s/{id}/tree/{rev}/{path}.
type treeEntry struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// tree lists the folder dir ("" for the top) of commit sha, one level, following
// the Link header's pages. A folder that does not exist is empty.
func (c *Client) tree(ctx context.Context, r repo, sha, dir string) ([]treeEntry, error) {
	u := c.apiURL(r, "tree", url.PathEscape(sha))
	if dir != "" {
		u += "/" + escapePath(dir)
	}
	var all []treeEntry
	for pages := 0; u != ""; pages++ {
		if pages > 10000 {
			return nil, fmt.Errorf("%s: listing %q: too many pages", r, dir)
		}
		var page []treeEntry
		next, err := c.getJSON(ctx, r, sha, dir, u, &page)
		if err != nil {
			if dir != "" && errors.Is(err, ErrEntryNotFound) {
				return nil, nil
			}
			return nil, err
		}
		all = append(all, page...)
		if next != "" {
			nu, err := url.Parse(u)
			if err != nil {
				return nil, err
			}
			ref, err := nu.Parse(next)
			if err != nil {
				return nil, fmt.Errorf("%s: listing %q: bad next page %q", r, dir, next)
			}
			next = ref.String()
		}
		u = next
	}
	return all, nil
}

// escapePath escapes each segment of a repository path.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// resolveURL is the address of file at revision rev: {endpoint}/{id}/resolve/{rev}/{file}
// (datasets: {endpoint}/datasets/{id}/...).
func (c *Client) resolveURL(r repo, rev, file string) string {
	prefix := c.Endpoint + "/"
	if r.kind == Dataset {
		prefix += "datasets/"
	}
	return prefix + r.id + "/resolve/" + url.PathEscape(rev) + "/" + escapePath(file)
}

// fileMeta is what a HEAD of a resolve URL says of a file.
type fileMeta struct {
	commit string // X-Repo-Commit
	etag   string // X-Linked-Etag (LFS: the sha256), else ETag, without quotes or W/
	size   int64  // X-Linked-Size, else Content-Length; -1 when unknown
	url    string // where to GET it: the redirect's Location (a CDN), else the resolve URL
}

// head asks for the metadata of file at commit sha. It follows redirects that
// stay on the endpoint's host (a renamed repository) and stops at the first
// that leaves it (an LFS file's CDN address), whose headers describe the file.
func (c *Client) head(ctx context.Context, r repo, sha, file string) (fileMeta, error) {
	var meta fileMeta
	err := c.withRetries(ctx, fmt.Sprintf("%s: %s", r, file), func() error {
		u := c.resolveURL(r, sha, file)
		for hops := 0; ; hops++ {
			req, err := c.newRequest(ctx, http.MethodHead, u)
			if err != nil {
				return err
			}
			hc := c.httpClient()
			hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := hc.Do(req)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return retryable{fmt.Errorf("HEAD %s: %w", u, stripURLs(err))}
			}
			resp.Body.Close()
			if resp.StatusCode >= 300 && resp.StatusCode < 400 {
				loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
				if err != nil || resp.Header.Get("Location") == "" {
					return fmt.Errorf("HEAD %s: HTTP %d without a usable Location", u, resp.StatusCode)
				}
				if c.sameHost(loc) && resp.Header.Get("X-Linked-Etag") == "" && hops < 10 {
					u = loc.String()
					continue
				}
				meta = metaFrom(resp, loc.String())
			} else if resp.StatusCode == http.StatusOK {
				meta = metaFrom(resp, u)
			} else {
				return c.statusError(resp, r, sha, file)
			}
			return nil
		}
	})
	if err != nil {
		return meta, err
	}
	if !etagPattern.MatchString(meta.etag) {
		return meta, &Error{Kind: r.kind, Repo: r.id, Revision: sha, File: file,
			Msg: fmt.Sprintf("the Hub gave no usable ETag (%q): cannot cache the file", meta.etag)}
	}
	if meta.commit != "" && meta.commit != sha {
		return meta, &Error{Kind: r.kind, Repo: r.id, Revision: sha, File: file,
			Msg: fmt.Sprintf("asked for commit %s, the Hub answered for %s", sha, meta.commit)}
	}
	return meta, nil
}

func metaFrom(resp *http.Response, u string) fileMeta {
	m := fileMeta{commit: resp.Header.Get("X-Repo-Commit"), url: u, size: -1}
	etag := resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	m.etag = strings.Trim(strings.TrimPrefix(strings.TrimSpace(etag), "W/"), `"`)
	size := resp.Header.Get("X-Linked-Size")
	if size == "" && (resp.StatusCode < 300 || resp.StatusCode >= 400) {
		size = resp.Header.Get("Content-Length")
	}
	if n, err := strconv.ParseInt(size, 10, 64); err == nil && n >= 0 {
		m.size = n
	}
	return m
}

// fetchBlob downloads a file into blob: into blob + ".incomplete" (resuming
// what an earlier attempt, or an earlier process, left there), then, once its
// size and, for an LFS file, its sha256 match the metadata, renamed to blob.
// A corrupted file is removed. The caller holds the blob's lock.
func (c *Client) fetchBlob(ctx context.Context, r repo, file string, meta fileMeta, blob string) error {
	inc := blob + ".incomplete"
	t0 := time.Now()
	resumedAt := int64(-1)
	err := c.withRetries(ctx, fmt.Sprintf("%s: %s", r, file), func() error {
		off, err := c.fetchOnce(ctx, r, file, meta, inc)
		if resumedAt < 0 {
			resumedAt = off
		}
		return err
	})
	if err != nil {
		if st, serr := os.Stat(inc); serr == nil && st.Size() > 0 && ctx.Err() == nil {
			return fmt.Errorf("%w (%d bytes kept in %s: the next attempt resumes from there)", err, st.Size(), inc)
		}
		return err
	}
	st, err := os.Stat(inc)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if meta.size >= 0 && st.Size() != meta.size {
		os.Remove(inc)
		return &Error{Kind: r.kind, Repo: r.id, File: file, Err: ErrCorrupt,
			Msg: fmt.Sprintf("downloaded %d bytes, the Hub announced %d: removed", st.Size(), meta.size)}
	}
	if sha256Pattern.MatchString(meta.etag) {
		sum, err := fileSHA256(inc)
		if err != nil {
			return fmt.Errorf("cache: %w", err)
		}
		if sum != meta.etag {
			os.Remove(inc)
			return &Error{Kind: r.kind, Repo: r.id, File: file, Err: ErrCorrupt,
				Msg: fmt.Sprintf("corrupted download: its sha256 is %s, the Hub's is %s: removed, not cached", sum, meta.etag)}
		}
	}
	if err := os.Chmod(inc, 0o644); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(inc, blob); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	d := time.Since(t0)
	note := ""
	if resumedAt > 0 {
		note = fmt.Sprintf(", resumed at %s", sizeString(resumedAt))
	}
	c.say("%s: %s %s in %.1fs (%s/s%s)\n", r, file, sizeString(st.Size()), d.Seconds(),
		sizeString(int64(float64(st.Size()-max(resumedAt, 0))/max(d.Seconds(), 1e-3))), note)
	return nil
}

// fetchOnce makes one attempt at the rest of the file: a Range request from
// the size of the incomplete file. off is where it started.
func (c *Client) fetchOnce(ctx context.Context, r repo, file string, meta fileMeta, inc string) (off int64, err error) {
	f, err := os.OpenFile(inc, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("cache: %w", err)
	}
	defer f.Close()
	off, err = f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("cache: %w", err)
	}
	if meta.size >= 0 && off > meta.size {
		if err := f.Truncate(0); err != nil {
			return 0, fmt.Errorf("cache: %w", err)
		}
		off = 0
	}
	if meta.size >= 0 && off == meta.size {
		return off, nil
	}
	req, err := c.newRequest(ctx, http.MethodGet, meta.url)
	if err != nil {
		return off, err
	}
	if off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := c.do(req)
	if err != nil {
		return off, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if off > 0 { // the server ignored the Range: start again
			if err := f.Truncate(0); err != nil {
				return off, fmt.Errorf("cache: %w", err)
			}
			off = 0
		}
	case http.StatusPartialContent:
		start, ok := rangeStart(resp.Header.Get("Content-Range"))
		if !ok || start != off {
			_ = f.Truncate(0)
			return off, retryable{fmt.Errorf("GET %s: asked for bytes from %d, got Content-Range %q: starting again", bare(req.URL), off, resp.Header.Get("Content-Range"))}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		_ = f.Truncate(0)
		return off, retryable{fmt.Errorf("GET %s: the server refused to resume at byte %d: starting again", bare(req.URL), off)}
	default:
		return off, c.statusError(resp, r, "", file)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, fmt.Errorf("cache: %w", err)
	}
	var dst io.Writer = f
	if c.Progress != nil {
		dst = &progressWriter{w: f, done: off, total: meta.size, last: time.Now(), say: c.say, label: fmt.Sprintf("%s: %s", r, file)}
	}
	n, err := io.Copy(dst, resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return off, ctx.Err()
		}
		return off, retryable{fmt.Errorf("GET %s: cut after %d bytes: %w", bare(req.URL), off+n, err)}
	}
	if meta.size >= 0 && off+n < meta.size {
		return off, retryable{fmt.Errorf("GET %s: cut after %d of %d bytes", bare(req.URL), off+n, meta.size)}
	}
	return off, f.Sync()
}

// bare is a URL without its query, which for a CDN holds a signature: not for logs.
func bare(u *url.URL) string {
	v := *u
	v.RawQuery, v.ForceQuery, v.Fragment, v.User = "", false, "", nil
	return v.String()
}

// stripURLs drops the *url.Error wrapper (which repeats the URL, query included).
func stripURLs(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// progressEvery is how often a long download reports how far it got.
const progressEvery = 30 * time.Second

// progressWriter counts what is written and says how far it got every progressEvery.
type progressWriter struct {
	w           io.Writer
	done, total int64
	last        time.Time
	say         func(string, ...any)
	label       string
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.done += int64(n)
	if time.Since(p.last) >= progressEvery {
		p.last = time.Now()
		if p.total > 0 {
			p.say("%s: %s of %s (%d%%)\n", p.label, sizeString(p.done), sizeString(p.total), p.done*100/p.total)
		} else {
			p.say("%s: %s\n", p.label, sizeString(p.done))
		}
	}
	return n, err
}

// rangeStart is the first byte of a Content-Range header ("bytes 100-199/200").
func rangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	first, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	return n, err == nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sizeString prints a byte count in B, kB, MB or GB (powers of 1000, as the Hub shows sizes).
func sizeString(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	case n < 1000*1000*1000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f GB", float64(n)/1e9)
}
