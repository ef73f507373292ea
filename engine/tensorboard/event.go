package tensorboard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// FileVersion is the file_version of the first event of every file.
const FileVersion = "brain.Event:2"

// TextPlugin is the plugin_name of text summaries.
const TextPlugin = "text"

// Event is a tensorflow.Event (tensorflow/core/util/event.proto) with the
// fields stx writes: a file_version event, or a summary of values.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string  // set in the first event of a file only
	Values      []Value // Summary.value
}

// Value is a tensorflow.Summary.Value (tensorflow/core/framework/summary.proto):
// a scalar (Text nil) or a text summary (a DT_STRING tensor of shape Shape
// with the strings Text, and metadata naming the text plugin).
type Value struct {
	Tag    string
	Scalar float32
	Text   []string
	// Shape is the text tensor's shape: nil or empty for one string (rank 0),
	// [n] for a list of n strings.
	Shape []int64
	// Plugin is the metadata's plugin_name (read back; "text" is written for text).
	Plugin string
}

// IsText reports whether v is a text summary.
func (v Value) IsText() bool { return v.Text != nil }

// ScalarValue is a scalar summary; the value is stored as a float32, as
// TensorBoard's simple_value is.
func ScalarValue(tag string, v float64) Value { return Value{Tag: tag, Scalar: float32(v)} }

// TextValue is a text summary of one string (a rank-0 tensor).
func TextValue(tag, text string) Value { return Value{Tag: tag, Text: []string{text}} }

// TextList is a text summary of several strings (a rank-1 tensor, shown by
// TensorBoard as a table of one column).
func TextList(tag string, texts []string) Value {
	return Value{Tag: tag, Text: append([]string{}, texts...), Shape: []int64{int64(len(texts))}}
}

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// Field numbers, from the .proto files.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary

	summaryValue = 1 // repeated Summary.Value

	valueTag      = 1 // string
	valueSimple   = 2 // float
	valueTensor   = 8 // TensorProto
	valueMetadata = 9 // SummaryMetadata

	metadataPluginData = 1 // SummaryMetadata.PluginData
	metadataDataClass  = 4 // DataClass enum
	pluginName         = 1 // string

	tensorDtype     = 1 // DataType enum
	tensorShape     = 2 // TensorShapeProto
	tensorStringVal = 8 // repeated bytes
	shapeDim        = 2 // repeated TensorShapeProto.Dim
	dimSize         = 1 // int64

	dtString        = 7 // DT_STRING
	dataClassTensor = 2 // DATA_CLASS_TENSOR
)

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return binary.AppendUvarint(appendTag(b, field, wireVarint), v)
}

func appendBytesField(b []byte, field int, data []byte) []byte {
	b = binary.AppendUvarint(appendTag(b, field, wireBytes), uint64(len(data)))
	return append(b, data...)
}

// Marshal encodes e as a serialized tensorflow.Event.
func (e Event) Marshal() []byte {
	var b []byte
	b = appendTag(b, eventWallTime, wireFixed64)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.WallTime))
	if e.Step != 0 {
		b = appendVarintField(b, eventStep, uint64(e.Step))
	}
	if e.FileVersion != "" {
		b = appendBytesField(b, eventFileVersion, []byte(e.FileVersion))
	}
	if len(e.Values) > 0 {
		var s []byte
		for _, v := range e.Values {
			s = appendBytesField(s, summaryValue, v.marshal())
		}
		b = appendBytesField(b, eventSummary, s)
	}
	return b
}

func (v Value) marshal() []byte {
	b := appendBytesField(nil, valueTag, []byte(v.Tag))
	if !v.IsText() {
		b = appendTag(b, valueSimple, wireFixed32)
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(v.Scalar))
	}
	var t []byte
	t = appendVarintField(t, tensorDtype, dtString)
	var shape []byte
	for _, d := range v.Shape {
		shape = appendBytesField(shape, shapeDim, appendVarintField(nil, dimSize, uint64(d)))
	}
	t = appendBytesField(t, tensorShape, shape) // present even when empty: a scalar
	for _, s := range v.Text {
		t = appendBytesField(t, tensorStringVal, []byte(s))
	}
	b = appendBytesField(b, valueTensor, t)
	// SummaryMetadata{plugin_data: {plugin_name: "text"}, data_class: DATA_CLASS_TENSOR}, as
	// tf.summary.text writes it (the text plugin's content, TextPluginData{version: 0}, is empty).
	md := appendBytesField(nil, metadataPluginData, appendBytesField(nil, pluginName, []byte(TextPlugin)))
	md = appendVarintField(md, metadataDataClass, dataClassTensor)
	return appendBytesField(b, valueMetadata, md)
}

// errProto is wrapped by the decoding errors.
var errProto = errors.New("malformed protobuf")

// field is one field of a protobuf message as read by forFields.
type field struct {
	num  int
	wire int
	u    uint64 // varint, fixed64 and fixed32 values
	data []byte // bytes values
}

// forFields calls fn for each field of message b, in order.
func forFields(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: bad field key", errProto)
		}
		b = b[n:]
		f := field{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case wireVarint:
			if f.u, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("%w: bad varint in field %d", errProto, f.num)
			}
			b = b[n:]
		case wireFixed64:
			if len(b) < 8 {
				return fmt.Errorf("%w: field %d cut short", errProto, f.num)
			}
			f.u, b = binary.LittleEndian.Uint64(b), b[8:]
		case wireFixed32:
			if len(b) < 4 {
				return fmt.Errorf("%w: field %d cut short", errProto, f.num)
			}
			f.u, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case wireBytes:
			size, n := binary.Uvarint(b)
			if n <= 0 || size > uint64(len(b)-n) {
				return fmt.Errorf("%w: field %d cut short", errProto, f.num)
			}
			f.data, b = b[n:n+int(size)], b[n+int(size):]
		default:
			return fmt.Errorf("%w: field %d has wire type %d", errProto, f.num, f.wire)
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// UnmarshalEvent decodes a serialized tensorflow.Event, keeping the fields
// Event has and skipping the others.
func UnmarshalEvent(b []byte) (Event, error) {
	var e Event
	err := forFields(b, func(f field) error {
		switch {
		case f.num == eventWallTime && f.wire == wireFixed64:
			e.WallTime = math.Float64frombits(f.u)
		case f.num == eventStep && f.wire == wireVarint:
			e.Step = int64(f.u)
		case f.num == eventFileVersion && f.wire == wireBytes:
			e.FileVersion = string(f.data)
		case f.num == eventSummary && f.wire == wireBytes:
			return forFields(f.data, func(f field) error {
				if f.num != summaryValue || f.wire != wireBytes {
					return nil
				}
				v, err := unmarshalValue(f.data)
				e.Values = append(e.Values, v)
				return err
			})
		}
		return nil
	})
	return e, err
}

func unmarshalValue(b []byte) (Value, error) {
	var v Value
	err := forFields(b, func(f field) error {
		switch {
		case f.num == valueTag && f.wire == wireBytes:
			v.Tag = string(f.data)
		case f.num == valueSimple && f.wire == wireFixed32:
			v.Scalar = math.Float32frombits(uint32(f.u))
		case f.num == valueTensor && f.wire == wireBytes:
			v.Text = []string{}
			dtype := uint64(0)
			defer func() {
				if dtype != dtString { // another summary's tensor: not text
					v.Text, v.Shape = nil, nil
				}
			}()
			return forFields(f.data, func(f field) error {
				switch {
				case f.num == tensorDtype && f.wire == wireVarint:
					dtype = f.u
				case f.num == tensorShape && f.wire == wireBytes:
					return forFields(f.data, func(f field) error {
						if f.num == shapeDim && f.wire == wireBytes {
							return forFields(f.data, func(f field) error {
								if f.num == dimSize && f.wire == wireVarint {
									v.Shape = append(v.Shape, int64(f.u))
								}
								return nil
							})
						}
						return nil
					})
				case f.num == tensorStringVal && f.wire == wireBytes:
					v.Text = append(v.Text, string(f.data))
				}
				return nil
			})
		case f.num == valueMetadata && f.wire == wireBytes:
			return forFields(f.data, func(f field) error {
				if f.num == metadataPluginData && f.wire == wireBytes {
					return forFields(f.data, func(f field) error {
						if f.num == pluginName && f.wire == wireBytes {
							v.Plugin = string(f.data)
						}
						return nil
					})
				}
				return nil
			})
		}
		return nil
	})
	return v, err
}
