package tensorboard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// ReadEvents reads the events of one event file, in order. A damaged or
// cut last record (a crash mid-write) ends the events without an error, as
// TensorBoard's readers stop there; tail reports its size in bytes.
func ReadEvents(path string) (events []Event, tail int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("tensorboard: %w", err)
	}
	recs, good, err := parse(data)
	if err != nil {
		return nil, 0, fmt.Errorf("tensorboard: %s: %w", path, err)
	}
	for _, r := range recs {
		events = append(events, r.Event)
	}
	return events, int64(len(data)) - good, nil
}

// ReadDir reads the events of every event file in dir, file after file in
// name order.
func ReadDir(dir string) ([]Event, error) {
	files, err := EventFiles(dir)
	if err != nil {
		return nil, err
	}
	var all []Event
	for _, f := range files {
		evs, _, err := ReadEvents(f)
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	return all, nil
}

// record is one event as read, with its serialized form.
type record struct {
	Event
	raw []byte
}

// parse decodes the records of data up to the first damaged one; good is
// the length of the records read.
func parse(data []byte) (recs []record, good int64, err error) {
	r := bufio.NewReader(bytes.NewReader(data))
	for {
		raw, err := ReadRecord(r)
		if errors.Is(err, io.EOF) || errors.Is(err, ErrCorrupt) {
			return recs, good, nil
		}
		if err != nil {
			return nil, 0, err
		}
		e, err := UnmarshalEvent(raw)
		if err != nil {
			// The checksums held: a record of something else, not damage.
			return nil, 0, fmt.Errorf("record at byte %d: %w", good, err)
		}
		recs = append(recs, record{Event: e, raw: raw})
		good += int64(len(raw)) + 16
	}
}

// TruncateAfter rewrites the event file at path without its events of step
// greater than step, and without a damaged last record: a run resumed from
// a checkpoint at step writes the later steps again, in a new file, and
// they must not appear twice. The file is replaced atomically (written to
// a temporary name, synced, renamed); one with nothing to drop is left as
// it is. It returns the number of events dropped and of damaged bytes cut.
func TruncateAfter(path string, step int64) (dropped int, cut int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("tensorboard: %w", err)
	}
	recs, good, err := parse(data)
	if err != nil {
		return 0, 0, fmt.Errorf("tensorboard: %s: %w", path, err)
	}
	cut = int64(len(data)) - good
	var kept []byte
	for _, r := range recs {
		if r.Step > step {
			dropped++
			continue
		}
		kept = AppendRecord(kept, r.raw) // as written: fields stx does not read stay
	}
	if dropped == 0 && cut == 0 {
		return 0, 0, nil
	}
	// The temporary name has no "tfevents": TensorBoard never reads it.
	tmp := filepath.Join(filepath.Dir(path), ".stx-truncate-"+strconv.Itoa(os.Getpid())+".tmp")
	if err := writeSynced(tmp, kept); err != nil {
		os.Remove(tmp)
		return 0, 0, fmt.Errorf("tensorboard: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, 0, fmt.Errorf("tensorboard: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return dropped, cut, nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
