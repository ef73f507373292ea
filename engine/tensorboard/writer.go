package tensorboard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Writer appends events to one event file. Events are buffered and reach
// the file at Flush, Sync and Close (or when the buffer fills). The first
// error is kept: every later call returns it and writes nothing, so a
// failed write (a full disk) leaves at most one damaged record at the end
// of the file, which readers stop at. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	path string
	w    io.Writer
	f    *os.File // nil when writing to a plain io.Writer
	bw   *bufio.Writer
	err  error
	now  func() time.Time
	buf  []byte
}

// bufferSize holds a rollout's records (tens of scalars a step), so that
// they reach the file at the caller's Flush.
const bufferSize = 64 << 10

// fileSeq numbers the event files of this process (the last part of the name).
var fileSeq atomic.Int64

// FilePrefix begins the name of every event file; TensorBoard reads the
// files whose name contains "tfevents".
const FilePrefix = "events.out.tfevents."

// IsEventFile reports whether a file name is an event file's.
func IsEventFile(name string) bool { return strings.Contains(name, "tfevents") }

// Create starts a new event file in dir (made if missing), named as
// TensorFlow names them, events.out.tfevents.<unix time>.<host>.<pid>.<n>,
// and writes its file_version event. The time in the name is now's, moved
// past that of every event file already in dir, so that the files sort in
// the order they were written.
func Create(dir string, now time.Time) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	files, err := EventFiles(dir)
	if err != nil {
		return nil, err
	}
	t := now.Unix()
	for _, f := range files {
		if ft, ok := fileTime(filepath.Base(f)); ok && ft >= t {
			t = ft + 1
		}
	}
	host, _ := os.Hostname()
	host = sanitizeHost(host)
	for {
		name := fmt.Sprintf("%s%010d.%s.%d.%d", FilePrefix, t, host, os.Getpid(), fileSeq.Add(1)-1)
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
		w := NewWriter(f)
		if err := w.Write(Event{WallTime: timeSeconds(now), FileVersion: FileVersion}); err != nil {
			f.Close()
			return nil, err
		}
		return w, nil
	}
}

// NewWriter writes events to out, starting with nothing: the caller writes
// the file_version event first (Create does).
func NewWriter(out io.Writer) *Writer {
	w := &Writer{w: out, bw: bufio.NewWriterSize(out, bufferSize), now: time.Now}
	if f, ok := out.(*os.File); ok {
		w.f, w.path = f, f.Name()
	}
	return w
}

// Path is the event file (empty for a plain io.Writer).
func (w *Writer) Path() string { return w.path }

// Write appends one event; a zero WallTime is set to now.
func (w *Writer) Write(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.bw == nil {
		return fmt.Errorf("tensorboard: write to %s: writer is closed", w.path)
	}
	if e.WallTime == 0 {
		e.WallTime = timeSeconds(w.now())
	}
	w.buf = AppendRecord(w.buf[:0], e.Marshal())
	if _, err := w.bw.Write(w.buf); err != nil {
		return w.fail("write", err)
	}
	return nil
}

// Flush hands the buffered events to the operating system: a crash of the
// process after it loses none of them.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flush()
}

func (w *Writer) flush() error {
	if w.err != nil || w.bw == nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		return w.fail("write", err)
	}
	return nil
}

// Sync flushes and makes the file durable (fsync).
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.flush(); err != nil {
		return err
	}
	if w.f != nil {
		if err := w.f.Sync(); err != nil {
			return w.fail("sync", err)
		}
	}
	return nil
}

// Close flushes, syncs and closes the file; after an earlier error it only
// closes it and returns that error.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bw == nil {
		return w.err
	}
	err := w.flush()
	if err == nil && w.f != nil {
		if serr := w.f.Sync(); serr != nil {
			err = w.fail("sync", serr)
		}
	}
	if c, ok := w.w.(io.Closer); ok {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = w.fail("close", cerr)
		}
	}
	w.bw = nil
	return err
}

// fail records the writer's first error.
func (w *Writer) fail(op string, err error) error {
	if w.path != "" {
		w.err = fmt.Errorf("tensorboard: %s %s: %w", op, w.path, err)
	} else {
		w.err = fmt.Errorf("tensorboard: %s: %w", op, err)
	}
	return w.err
}

func timeSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// fileTime reads the <unix time> part of an event file's name.
func fileTime(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, FilePrefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ".")
	t, err := strconv.ParseInt(digits, 10, 64)
	return t, err == nil
}

// sanitizeHost keeps a host name usable in a file name.
func sanitizeHost(h string) string {
	h = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, h)
	if h == "" {
		return "localhost"
	}
	return h
}

// EventFiles lists the event files of dir, sorted by name (the order
// TensorBoard reads them in); a missing dir has none.
func EventFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && IsEventFile(e.Name()) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}
