package tfevents

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/worker/tfevents/tbpb"
)

// A test-only event file writer: TFRecord framing as TensorFlow's
// RecordWriter writes it, events as TF1/PyTorch (simple_value) and TF2
// (scalar tensors with metadata on a tag's first value) write them.

// appendRecord appends data framed as one TFRecord.
func appendRecord(dst, data []byte) []byte {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], MaskedCRC(hdr[:8]))
	dst = append(dst, hdr[:]...)
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

func marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func fileVersion() []byte {
	return marshal(&tbpb.Event{WallTime: 1.7e9, What: &tbpb.Event_FileVersion{FileVersion: "brain.Event:2"}})
}

func event(step int64, wall float64, vals ...*tbpb.Summary_Value) []byte {
	return marshal(&tbpb.Event{WallTime: wall, Step: step,
		What: &tbpb.Event_Summary{Summary: &tbpb.Summary{Value: vals}}})
}

func simple(tag string, v float32) *tbpb.Summary_Value {
	return &tbpb.Summary_Value{Tag: tag, Value: &tbpb.Summary_Value_SimpleValue{SimpleValue: v}}
}

func tensor(tag string, t *tbpb.TensorProto, md *tbpb.SummaryMetadata) *tbpb.Summary_Value {
	return &tbpb.Summary_Value{Tag: tag, Metadata: md, Value: &tbpb.Summary_Value_Tensor{Tensor: t}}
}

func plugin(name string) *tbpb.SummaryMetadata {
	return &tbpb.SummaryMetadata{PluginData: &tbpb.SummaryMetadata_PluginData{PluginName: name}}
}

func scalarsMeta() *tbpb.SummaryMetadata {
	md := plugin("scalars")
	md.DataClass = tbpb.DataClass_DATA_CLASS_SCALAR
	return md
}

func floatVal(v float32) *tbpb.TensorProto {
	return &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT, FloatVal: []float32{v}}
}

func floatContent(v float32) *tbpb.TensorProto {
	return &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT,
		TensorContent: binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))}
}

func doubleContent(v float64) *tbpb.TensorProto {
	return &tbpb.TensorProto{Dtype: tbpb.DataType_DT_DOUBLE,
		TensorContent: binary.LittleEndian.AppendUint64(nil, math.Float64bits(v))}
}

// histoValue is a Summary.Value carrying a histogram (field 5, a member of
// the value oneof that tbpb leaves out), encoded by hand.
func histoValue(tag string) []byte {
	var histo []byte
	histo = protowire.AppendTag(histo, 1, protowire.Fixed64Type) // min
	histo = protowire.AppendFixed64(histo, math.Float64bits(-1))
	var v []byte
	v = protowire.AppendTag(v, 1, protowire.BytesType)
	v = protowire.AppendString(v, tag)
	v = protowire.AppendTag(v, 5, protowire.BytesType)
	return protowire.AppendBytes(v, histo)
}

// eventRaw wraps already encoded Summary.Values.
func eventRaw(step int64, wall float64, values ...[]byte) []byte {
	var sum []byte
	for _, v := range values {
		sum = protowire.AppendTag(sum, 1, protowire.BytesType)
		sum = protowire.AppendBytes(sum, v)
	}
	var ev []byte
	ev = protowire.AppendTag(ev, 1, protowire.Fixed64Type)
	ev = protowire.AppendFixed64(ev, math.Float64bits(wall))
	ev = protowire.AppendTag(ev, 2, protowire.VarintType)
	ev = protowire.AppendVarint(ev, uint64(step))
	ev = protowire.AppendTag(ev, 5, protowire.BytesType)
	return protowire.AppendBytes(ev, sum)
}

// fileOf frames every record.
func fileOf(records ...[]byte) []byte {
	var b []byte
	for _, r := range records {
		b = appendRecord(b, r)
	}
	return b
}
