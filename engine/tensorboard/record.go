// Package tensorboard writes TensorBoard event files without TensorFlow or a
// protobuf library: TFRecord framing around hand-encoded tensorflow.Event
// messages holding scalar (simple_value) and text (string tensor, text
// plugin) summaries. It also reads back what it writes, for resuming a run
// (TruncateAfter) and for tests.
//
// An event file is a sequence of records, each
//
//	uint64 length (little endian)
//	uint32 masked CRC-32C of the 8 length bytes
//	length bytes of data: one serialized tensorflow.Event
//	uint32 masked CRC-32C of the data
//
// where mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, as
// tensorflow/core/lib/hash/crc32c.h defines it. The first event of a file
// carries file_version "brain.Event:2"; TensorBoard reads every file of a
// directory whose name contains "tfevents".
package tensorboard

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// castagnoli is the CRC-32C table of TFRecord checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const maskDelta = 0xa282ead8

// Mask is TensorFlow's masking of a CRC stored next to the data it covers
// (a CRC of data holding CRCs is then not degenerate).
func Mask(crc uint32) uint32 { return (crc>>15 | crc<<17) + maskDelta }

// Unmask inverts Mask.
func Unmask(masked uint32) uint32 {
	r := masked - maskDelta
	return r>>17 | r<<15
}

// MaskedCRC is the masked CRC-32C of data.
func MaskedCRC(data []byte) uint32 { return Mask(crc32.Checksum(data, castagnoli)) }

// AppendRecord appends data framed as one TFRecord to dst.
func AppendRecord(dst, data []byte) []byte {
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(len(data)))
	dst = append(dst, hdr[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, MaskedCRC(hdr[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// ErrCorrupt is returned (wrapped) by ReadRecord for a record whose
// checksums do not match, or which ends before its length says.
var ErrCorrupt = errors.New("corrupt TFRecord")

// maxRecord bounds the length a record header may claim (event records are
// small; a damaged header must not make the reader allocate gigabytes).
const maxRecord = 1 << 30

// ReadRecord reads one TFRecord and returns its data, checking both CRCs.
// At the end of the input it returns io.EOF; a record cut short (a crash
// mid-write) or failing a checksum is an error wrapping ErrCorrupt.
func ReadRecord(r *bufio.Reader) ([]byte, error) {
	var hdr [12]byte
	n, err := io.ReadFull(r, hdr[:])
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("%w: header cut short after %d bytes", ErrCorrupt, n)
	}
	if got, want := binary.LittleEndian.Uint32(hdr[8:]), MaskedCRC(hdr[:8]); got != want {
		return nil, fmt.Errorf("%w: length checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	size := binary.LittleEndian.Uint64(hdr[:8])
	if size > maxRecord {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, size)
	}
	data := make([]byte, size+4)
	if n, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("%w: record of %d bytes cut short after %d", ErrCorrupt, size, n)
	}
	data, sum := data[:size], binary.LittleEndian.Uint32(data[size:])
	if want := MaskedCRC(data); sum != want {
		return nil, fmt.Errorf("%w: data checksum %#08x, want %#08x", ErrCorrupt, sum, want)
	}
	return data, nil
}
