package rundir

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
)

// Writer appends JSON records to a file, one line each. A record goes to
// the OS in a single write call ending in '\n', so after a crash the file
// ends with complete lines, possibly followed by one partial line that
// OpenWriter (and Open) cut away. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	path string
	f    *os.File
	size int64 // bytes of complete lines; a failed write is cut back to it
}

// OpenWriter opens path for appending, creating it if needed, after
// cutting a partial last line left by an interrupted write.
func OpenWriter(path string) (*Writer, error) {
	if _, err := truncatePartialLine(path); err != nil {
		return nil, err
	}
	w := &Writer{path: path}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", w.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open %s: %w", w.path, err)
	}
	w.f, w.size = f, st.Size()
	return nil
}

// Path is the file the writer appends to.
func (w *Writer) Path() string { return w.path }

// Append writes v as one JSON line.
func (w *Writer) Append(v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("append to %s: %w", w.path, err)
	}
	return w.appendLine(line)
}

// appendLine writes one record; line is compact JSON without the newline.
func (w *Writer) appendLine(line []byte) error {
	if bytes.IndexByte(line, '\n') >= 0 { // only a custom MarshalJSON can do this
		var buf bytes.Buffer
		if err := json.Compact(&buf, line); err != nil {
			return fmt.Errorf("append to %s: %w", w.path, err)
		}
		line = buf.Bytes()
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("append to %s: writer is closed", w.path)
	}
	n, err := w.f.Write(line)
	if err != nil {
		// A short write (a full disk) must not leave a partial line that
		// the next record would be glued to.
		if n > 0 {
			w.f.Truncate(w.size)
		}
		return fmt.Errorf("append to %s: %w", w.path, err)
	}
	w.size += int64(n)
	return nil
}

// Sync makes the lines appended so far durable.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("sync %s: writer is closed", w.path)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", w.path, err)
	}
	return nil
}

// Close syncs and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", w.path, err)
	}
	return nil
}

// filter rewrites the file keeping the lines keep accepts, atomically,
// and goes on appending to the new file. It returns how many lines it
// dropped; with none dropped the file is left untouched.
func (w *Writer) filter(keep func(line []byte) (bool, error)) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, fmt.Errorf("rewrite %s: writer is closed", w.path)
	}
	var kept bytes.Buffer
	dropped := 0
	err := readLines(w.path, func(_ int, line []byte) error {
		ok, err := keep(line)
		if ok {
			kept.Write(line)
			kept.WriteByte('\n')
		} else {
			dropped++
		}
		return err
	})
	if err != nil || dropped == 0 {
		return 0, err
	}
	if err := writeFileAtomic(w.path, kept.Bytes()); err != nil {
		return 0, err
	}
	w.f.Close()
	w.f = nil
	return dropped, w.open()
}

// readLines calls fn for each complete, non-blank line of a JSONL file,
// with its 1-based line number; errors name path:line. A last line
// without its newline is a record still being written (or one a crash
// interrupted) and is skipped.
func readLines(path string, fn func(lineNo int, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // partial or no last line
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
}

// jsonFloat is a float64 that survives JSON when it is not finite: NaN and
// ±Inf, which encoding/json refuses and which a diverging run does
// produce, are written as the strings "NaN", "+Inf" and "-Inf".
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return json.Marshal(v)
}

func (f *jsonFloat) UnmarshalJSON(data []byte) error {
	var s string
	if json.Unmarshal(data, &s) == nil {
		v, ok := nonFinite(s)
		if !ok {
			return fmt.Errorf("%q is not a number", s)
		}
		*f = jsonFloat(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*f = jsonFloat(v)
	return nil
}

// nonFinite parses the strings jsonFloat writes for NaN and ±Inf.
func nonFinite(s string) (float64, bool) {
	switch s {
	case "NaN":
		return math.NaN(), true
	case "+Inf", "Inf":
		return math.Inf(1), true
	case "-Inf":
		return math.Inf(-1), true
	}
	return 0, false
}

// StepKey is the field of a metrics record that holds its step.
const StepKey = "step"

// LogMetrics appends one metrics record, {"step": step, name: value, ...}
// with the names sorted. Non-finite values are written as "NaN", "+Inf"
// or "-Inf". Records carry no time stamp, so a resumed run's metrics file
// is byte for byte the one an uninterrupted run writes.
func (d *Dir) LogMetrics(step int, values map[string]float64) error {
	if step < 0 {
		return fmt.Errorf("log metrics: negative step %d", step)
	}
	enc := make(map[string]jsonFloat, len(values))
	for k, v := range values {
		if k == "" || k == StepKey {
			return fmt.Errorf("log metrics at step %d: invalid metric name %q", step, k)
		}
		enc[k] = jsonFloat(v)
	}
	line := []byte(`{"` + StepKey + `":` + strconv.Itoa(step))
	if len(enc) > 0 {
		rest, err := json.Marshal(enc) // sorts the keys
		if err != nil {
			return fmt.Errorf("log metrics at step %d: %w", step, err)
		}
		line = append(line, ',')
		line = append(line, rest[1:]...)
	} else {
		line = append(line, '}')
	}
	if d.replica {
		return nil
	}
	if err := d.metrics.appendLine(line); err != nil {
		return err
	}
	if m := d.getMirror(); m != nil {
		m.MirrorMetrics(step, values)
	}
	return nil
}

// LogEpisode appends one episode record (any JSON object; give it a
// "rollout" field for TruncateEpisodesAfter).
func (d *Dir) LogEpisode(v any) error {
	if d.replica {
		return nil
	}
	if err := d.episodes.Append(v); err != nil {
		return err
	}
	if m := d.getMirror(); m != nil {
		m.MirrorEpisode(v)
	}
	return nil
}

// TruncateMetricsAfter drops the metrics records whose step is greater
// than step: on resume from a checkpoint, the steps after it are trained
// again and must not appear twice.
func (d *Dir) TruncateMetricsAfter(step int) error {
	if d.replica {
		return nil
	}
	_, err := d.metrics.filter(fieldAtMost(StepKey, step))
	if err != nil {
		return fmt.Errorf("truncate metrics after step %d: %w", step, err)
	}
	return nil
}

// TruncateEpisodesAfter drops the episode records whose "rollout" field is
// greater than rollout; records without the field are kept.
func (d *Dir) TruncateEpisodesAfter(rollout int) error {
	if d.replica {
		return nil
	}
	keep := fieldAtMost("rollout", rollout)
	_, err := d.episodes.filter(func(line []byte) (bool, error) {
		ok, err := keep(line)
		if errors.Is(err, errNoField) {
			return true, nil
		}
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("truncate episodes after rollout %d: %w", rollout, err)
	}
	return nil
}

var errNoField = errors.New("missing field")

// fieldAtMost accepts records whose numeric field key is ≤ limit.
func fieldAtMost(key string, limit int) func([]byte) (bool, error) {
	return func(line []byte) (bool, error) {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			return false, err
		}
		raw, ok := rec[key]
		if !ok {
			return false, fmt.Errorf("%w %q", errNoField, key)
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, fmt.Errorf("field %q: %w", key, err)
		}
		return v <= float64(limit), nil
	}
}

// ReadMetrics reads a metrics file: one map per record, numbers as
// float64 (the strings "NaN", "+Inf" and "-Inf" become those floats), in
// file order. Every record must have a numeric "step".
func ReadMetrics(path string) ([]map[string]any, error) {
	var out []map[string]any
	err := readLines(path, func(_ int, line []byte) error {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		if rec == nil {
			return errors.New("record is not a JSON object")
		}
		if _, ok := rec[StepKey].(float64); !ok {
			return fmt.Errorf("record has no numeric %q", StepKey)
		}
		for k, v := range rec {
			if s, ok := v.(string); ok {
				if f, ok := nonFinite(s); ok {
					rec[k] = f
				}
			}
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// ReadEpisodes reads an episodes file, one map per record in file order.
func ReadEpisodes(path string) ([]map[string]any, error) {
	var out []map[string]any
	err := readLines(path, func(_ int, line []byte) error {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read episodes: %w", err)
	}
	return out, nil
}

// MetricNames lists the names in metrics records other than "step", sorted.
func MetricNames(records []map[string]any) []string {
	seen := map[string]bool{}
	for _, r := range records {
		for k := range r {
			if k != StepKey {
				seen[k] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for k := range seen {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
