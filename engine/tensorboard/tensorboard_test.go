package tensorboard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMaskedCRC: CRC-32C check values (RFC 3720 B.4 and the "123456789" check value) and
// their masked forms as TensorBoard's own masked_crc32c computes them
// (tensorboard/compat/tensorflow_stub/pywrap_tensorflow.py).
func TestMaskedCRC(t *testing.T) {
	ascending := make([]byte, 32)
	for i := range ascending {
		ascending[i] = byte(i)
	}
	for _, c := range []struct {
		data        []byte
		crc, masked uint32
		name        string
	}{
		{nil, 0, 0xa282ead8, "empty"},
		{[]byte("a"), 0xc1d04330, 0x28e46e78, "a"},
		{[]byte("123456789"), 0xe3069283, 0xc78ab0e5, "123456789"},
		{make([]byte, 32), 0x8a9136aa, 0x0fd7fffa, "32 zeros"},
		{bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43, 0xf909b029, "32 0xff"},
		{ascending, 0x46dd794e, 0x951f7892, "0..31"},
	} {
		if got := crc32.Checksum(c.data, castagnoli); got != c.crc {
			t.Errorf("%s: CRC-32C %#08x, want %#08x", c.name, got, c.crc)
		}
		if got := MaskedCRC(c.data); got != c.masked {
			t.Errorf("%s: masked %#08x, want %#08x", c.name, got, c.masked)
		}
		if got := Unmask(c.masked); got != c.crc {
			t.Errorf("%s: unmask %#08x, want %#08x", c.name, got, c.crc)
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenBytes: the events and the record framing are byte for byte what TensorBoard's
// protobuf classes (tensorboard.compat.proto) serialize and its RecordWriter frames for the
// same messages (generated once with tensorboard 2.21.0, protobuf 7.36.2).
func TestGoldenBytes(t *testing.T) {
	first := Event{WallTime: 1700000000.25, FileVersion: FileVersion}
	scalars := Event{WallTime: 1700000001.5, Step: 42, Values: []Value{ScalarValue("policy/loss", 0.5), ScalarValue("val/accuracy", -1.25)}}
	for _, c := range []struct {
		e    Event
		want string
	}{
		{first, "0900001040fc54d9411a0d627261696e2e4576656e743a32"},
		{scalars, "0900006040fc54d941102a2a290a120a0b706f6c6963792f6c6f7373150000003f0a130a0c76616c2f6163637572616379150000a0bf"},
		{Event{WallTime: 1700000002, Values: []Value{TextValue("recipe", "hi ü")}},
			"0900008040fc54d9412a230a210a06726563697065420b080712004205686920c3bc4a0a0a060a04746578742002"},
		{Event{WallTime: 1700000003, Step: 300, Values: []Value{TextList("episodes", []string{"a", "bc"})}},
			"090000c040fc54d94110ac022a290a270a08657069736f646573420f0807120412020802420161420262634a0a0a060a04746578742002"},
	} {
		if got := hex.EncodeToString(c.e.Marshal()); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.e, got, c.want)
		}
		back, err := UnmarshalEvent(mustHex(t, c.want))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Marshal(), c.e.Marshal()) {
			t.Errorf("decoded %+v, want %+v", back, c.e)
		}
	}
	var file bytes.Buffer
	w := NewWriter(&file)
	for _, e := range []Event{first, scalars} {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "1800000000000000a37f4b220900001040fc54d9411a0d627261696e2e4576656e743a32338d2fe9" +
		"36000000000000004f578cef0900006040fc54d941102a2a290a120a0b706f6c6963792f6c6f7373150000003f0a130a0c76616c2f6163637572616379150000a0bfb768622e"
	if got := hex.EncodeToString(file.Bytes()); got != want {
		t.Errorf("records:\n got %s\nwant %s", got, want)
	}
}

// The test's own reader: TFRecord framing and a generic protobuf decoder, written from the
// format's description and independent of the package's reader.

type pbField struct {
	wire int
	u    uint64
	msg  []byte
}

// testRecords splits an event file into its records' data, checking the masked CRCs.
func testRecords(t *testing.T, data []byte) [][]byte {
	t.Helper()
	mask := func(b []byte) uint32 {
		c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		return (c>>15 | c<<17) + 0xa282ead8
	}
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 12 {
			t.Fatalf("%d bytes of a record header", len(data))
		}
		n := binary.LittleEndian.Uint64(data)
		if binary.LittleEndian.Uint32(data[8:]) != mask(data[:8]) {
			t.Fatal("bad length CRC")
		}
		if uint64(len(data)) < 16+n {
			t.Fatalf("record of %d bytes cut short", n)
		}
		rec := data[12 : 12+n]
		if binary.LittleEndian.Uint32(data[12+n:]) != mask(rec) {
			t.Fatal("bad data CRC")
		}
		out = append(out, rec)
		data = data[16+n:]
	}
	return out
}

// testDecode maps field numbers to their values, in order.
func testDecode(t *testing.T, b []byte) map[int][]pbField {
	t.Helper()
	out := map[int][]pbField{}
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			t.Fatal("bad key")
		}
		b = b[n:]
		f := pbField{wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.u, n = binary.Uvarint(b)
			b = b[n:]
		case 1:
			f.u, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			f.u, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			size, n := binary.Uvarint(b)
			f.msg, b = b[n:n+int(size)], b[n+int(size):]
		default:
			t.Fatalf("wire type %d", f.wire)
		}
		out[int(key>>3)] = append(out[int(key>>3)], f)
	}
	return out
}

// TestRoundTrip writes events with Create and reads the file with the test's reader, by the
// field numbers of event.proto, summary.proto, tensor.proto and tensor_shape.proto.
func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tb")
	w, err := Create(dir, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^events\.out\.tfevents\.1700000000\.[A-Za-z0-9._-]+\.\d+\.\d+$`).MatchString(filepath.Base(w.Path())) {
		t.Errorf("file name %s", filepath.Base(w.Path()))
	}
	events := []Event{
		{Step: 0, Values: []Value{TextValue("recipe", "```cue\nrecipes: sft: {}\n```")}},
		{Step: 1, Values: []Value{ScalarValue("policy/loss", 2.5), ScalarValue("val/accuracy", math.NaN())}},
		{Step: 1 << 40, Values: []Value{TextList("episodes", []string{"one", "two"})}},
	}
	for _, e := range events {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	recs := testRecords(t, data)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	ev := testDecode(t, recs[0])
	if string(ev[3][0].msg) != "brain.Event:2" || math.Float64frombits(ev[1][0].u) != 1700000000 {
		t.Errorf("first event %v", ev)
	}
	// Scalars: Event.summary(5).value(1){tag(1), simple_value(2) float}.
	ev = testDecode(t, recs[2])
	if ev[2][0].u != 1 || len(ev[5]) != 1 {
		t.Fatalf("scalar event %v", ev)
	}
	vals := testDecode(t, ev[5][0].msg)[1]
	if len(vals) != 2 {
		t.Fatalf("%d values", len(vals))
	}
	v0, v1 := testDecode(t, vals[0].msg), testDecode(t, vals[1].msg)
	if string(v0[1][0].msg) != "policy/loss" || v0[2][0].wire != 5 || math.Float32frombits(uint32(v0[2][0].u)) != 2.5 ||
		string(v1[1][0].msg) != "val/accuracy" || !math.IsNaN(float64(math.Float32frombits(uint32(v1[2][0].u)))) {
		t.Errorf("scalar values %v %v", v0, v1)
	}
	if wall := math.Float64frombits(ev[1][0].u); wall < float64(time.Now().Unix()-60) {
		t.Errorf("wall time %v is not now", wall)
	}
	// Text: value{tag(1), tensor(8){dtype(1)=7, tensor_shape(2){dim(2){size(1)}}, string_val(8)},
	// metadata(9){plugin_data(1){plugin_name(1)}, data_class(4)=2}}.
	for i, want := range []struct {
		step  uint64
		tag   string
		shape []uint64
		texts []string
	}{{0, "recipe", nil, []string{events[0].Values[0].Text[0]}}, {1 << 40, "episodes", []uint64{2}, []string{"one", "two"}}} {
		ev := testDecode(t, recs[[]int{1, 3}[i]])
		if len(ev[2]) > 0 && ev[2][0].u != want.step || len(ev[2]) == 0 && want.step != 0 {
			t.Errorf("%s: step %v", want.tag, ev[2])
		}
		v := testDecode(t, testDecode(t, ev[5][0].msg)[1][0].msg)
		tensor := testDecode(t, v[8][0].msg)
		md := testDecode(t, v[9][0].msg)
		if string(v[1][0].msg) != want.tag || tensor[1][0].u != 7 || len(tensor[2]) != 1 ||
			string(testDecode(t, md[1][0].msg)[1][0].msg) != "text" || md[4][0].u != 2 {
			t.Errorf("%s: value %v tensor %v metadata %v", want.tag, v, tensor, md)
		}
		var shape []uint64
		for _, d := range testDecode(t, tensor[2][0].msg)[2] {
			shape = append(shape, testDecode(t, d.msg)[1][0].u)
		}
		var texts []string
		for _, s := range tensor[8] {
			texts = append(texts, string(s.msg))
		}
		if len(shape) != len(want.shape) || len(shape) == 1 && shape[0] != want.shape[0] || strings.Join(texts, "|") != strings.Join(want.texts, "|") {
			t.Errorf("%s: shape %v texts %q", want.tag, shape, texts)
		}
	}
	// The package's reader agrees.
	got, tail, err := ReadEvents(w.Path())
	if err != nil || tail != 0 || len(got) != 4 {
		t.Fatalf("ReadEvents: %d events, tail %d, %v", len(got), tail, err)
	}
	if got[3].Step != 1<<40 || got[3].Values[0].Plugin != TextPlugin || len(got[3].Values[0].Shape) != 1 || got[2].Values[0].Scalar != 2.5 {
		t.Errorf("ReadEvents: %+v", got)
	}
}

// TestCreateOrdersFiles: a new file's name sorts after every event file already there, also
// one written in the same second or stamped in the future.
func TestCreateOrdersFiles(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1700000000, 0)
	a, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	future := filepath.Join(dir, FilePrefix+"1800000000.elsewhere.1.0")
	if err := os.WriteFile(future, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	files, err := EventFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a.Path(), b.Path(), future, c.Path()}
	if strings.Join(files, "\n") != strings.Join(want, "\n") {
		t.Errorf("files in name order:\n%s\nwant the order written:\n%s", strings.Join(files, "\n"), strings.Join(want, "\n"))
	}
}

// TestTruncateAfter: events past a step go, with a damaged last record; a file with nothing
// to drop is left untouched.
func TestTruncateAfter(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(1); s <= 5; s++ {
		if err := w.Write(Event{Step: s, Values: []Value{ScalarValue("x", float64(s))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := w.Path()
	data, _ := os.ReadFile(path)
	// A crash in the middle of a sixth record.
	partial := AppendRecord(nil, Event{Step: 6, Values: []Value{ScalarValue("x", 6)}}.Marshal())
	if err := os.WriteFile(path, append(data, partial[:len(partial)-3]...), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, tail, err := ReadEvents(path)
	if err != nil || len(evs) != 6 || tail != int64(len(partial)-3) {
		t.Fatalf("before: %d events, tail %d, %v", len(evs), tail, err)
	}
	dropped, cut, err := TruncateAfter(path, 3)
	if err != nil || dropped != 2 || cut != int64(len(partial)-3) {
		t.Fatalf("TruncateAfter: dropped %d, cut %d, %v", dropped, cut, err)
	}
	after, _ := os.ReadFile(path)
	if want := len(data) - 2*len(partial); len(after) != want || !bytes.Equal(after, data[:want]) {
		t.Errorf("file after: %d bytes, want the first %d of the original", len(after), want)
	}
	st, _ := os.Stat(path)
	if dropped, cut, err := TruncateAfter(path, 3); err != nil || dropped != 0 || cut != 0 {
		t.Fatalf("again: dropped %d, cut %d, %v", dropped, cut, err)
	}
	if st2, _ := os.Stat(path); !os.SameFile(st, st2) {
		t.Error("a file with nothing to drop was rewritten")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestWriteErrorSticks: on a full disk the first error is kept and returned by every later call.
func TestWriteErrorSticks(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	w := NewWriter(f)
	if err := w.Write(Event{Step: 1, Values: []Value{ScalarValue("x", 1)}}); err != nil {
		t.Fatalf("buffered write: %v", err)
	}
	err = w.Flush()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush: %v, want ENOSPC", err)
	}
	if err2 := w.Write(Event{Step: 2}); err2 != err {
		t.Errorf("later write: %v", err2)
	}
	if err2 := w.Close(); err2 != err {
		t.Errorf("close: %v", err2)
	}
}

// TestReadRecordRejectsDamage: a flipped bit in the length or the data is ErrCorrupt.
func TestReadRecordRejectsDamage(t *testing.T) {
	rec := AppendRecord(nil, []byte("payload"))
	for _, i := range []int{0, 9, 13, len(rec) - 1} {
		bad := append([]byte{}, rec...)
		bad[i] ^= 1
		if _, _, err := parse(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadRecord(bufioReader(bad)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
