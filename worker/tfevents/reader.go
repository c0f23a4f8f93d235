// Package tfevents reads TensorBoard event files (events.out.tfevents.*)
// incrementally, as a training run writes them, and returns their scalar
// summaries as points (tag, step, value, wall time).
//
// An event file is a sequence of TFRecords: a little-endian uint64 length,
// the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the
// data. Both CRCs are checked. The data is a tensorflow.Event protobuf
// (tbpb holds the few fields read); a scalar is a Summary.Value with
// simple_value (TF1, PyTorch, tensorboardX) or with a float or double
// tensor of one element (TF2's tf.summary.scalar, new-style writers), the
// latter only for tags whose metadata, written with a tag's first value,
// names the scalars plugin or the scalar data class, or for tags that came
// without metadata.
//
// The reader is fed bytes as the file grows: a record cut short at the end
// waits for the rest and is not an error; a CRC mismatch or a record whose
// data is not an Event is, naming its offset, and ends the file's reading
// (framing after it cannot be trusted). A record larger than the reader's
// limit is checked and skipped without being held in memory (graph defs,
// images). This package is pure: no imports of the rest of the worker; only
// File touches the file system.
package tfevents

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/worker/tfevents/tbpb"
)

// Point is one scalar summary. Value is as written: it may be NaN or ±Inf.
type Point struct {
	Tag      string
	Step     int64
	Value    float64
	WallTime time.Time
}

// DefaultMaxRecord is the largest record NewReader holds in memory; an
// event of scalars is a few hundred bytes.
const DefaultMaxRecord = 16 << 20

// maxTags bounds the tags whose metadata a reader remembers; past it a
// new tag's tensors count as scalars when they are one float or double,
// as for a tag without metadata.
const maxTags = 100_000

const (
	headerLen = 12 // length u64, its masked CRC u32
	footerLen = 4  // the data's masked CRC u32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC-32C of b.
func MaskedCRC(b []byte) uint32 { return mask(crc32.Checksum(b, castagnoli)) }

func mask(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }

// CorruptError reports a record that cannot be read. Offset is where the
// record starts in the file.
type CorruptError struct {
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("tfevents: corrupt record at offset %d: %s", e.Offset, e.Reason)
}

type state uint8

const (
	inHeader state = iota
	inData
	inFooter
)

// Reader turns the bytes of one event file, fed in order, into points. It
// is not safe for concurrent use; one goroutine owns it.
type Reader struct {
	max     uint64
	state   state
	start   int64 // file offset of the record being read
	off     int64 // file offset of the next byte fed
	hdr     [headerLen]byte
	ftr     [footerLen]byte
	n       int    // bytes of hdr or ftr collected
	length  uint64 // data length of the record being read
	left    uint64 // data bytes still to come
	data    []byte // the data, unless skipping
	skip    bool   // the record is over max: checked, not kept
	crc     uint32 // running CRC-32C of the data
	skipped int
	err     error
	scalar  map[string]bool // per tag: its metadata said scalar (true) or another kind (false)
}

// NewReader returns a reader with DefaultMaxRecord.
func NewReader() *Reader { return NewReaderSize(DefaultMaxRecord) }

// NewReaderSize returns a reader that holds records of up to maxRecord
// bytes in memory and skips larger ones.
func NewReaderSize(maxRecord int) *Reader {
	return &Reader{max: uint64(maxRecord), scalar: map[string]bool{}}
}

// Offset is the file offset just past the last complete record: where a
// new reader would resume.
func (r *Reader) Offset() int64 { return r.start }

// Fed is how many bytes Feed has consumed in all.
func (r *Reader) Fed() int64 { return r.off }

// Skipped is how many records were over the size limit and skipped.
func (r *Reader) Skipped() int { return r.skipped }

// Feed consumes the next bytes of the file and returns the points of the
// records they complete. Once a record is corrupt it returns the points
// before it and a *CorruptError, and the same error on every later call.
// Feed never keeps p.
func (r *Reader) Feed(p []byte) ([]Point, error) {
	var pts []Point
	for len(p) > 0 && r.err == nil {
		switch r.state {
		case inHeader:
			k := copy(r.hdr[r.n:], p)
			r.n += k
			p = p[k:]
			r.off += int64(k)
			if r.n < headerLen {
				continue
			}
			if got, want := binary.LittleEndian.Uint32(r.hdr[8:]), MaskedCRC(r.hdr[:8]); got != want {
				r.fail(fmt.Sprintf("length CRC %#08x, want %#08x", got, want))
				continue
			}
			r.length = binary.LittleEndian.Uint64(r.hdr[:8])
			r.left, r.crc, r.n = r.length, 0, 0
			r.skip = r.length > r.max
			r.data = r.data[:0]
			r.state = inData
		case inData:
			k := uint64(len(p))
			if k > r.left {
				k = r.left
			}
			r.crc = crc32.Update(r.crc, castagnoli, p[:k])
			if !r.skip {
				r.data = append(r.data, p[:k]...)
			}
			r.left -= k
			p = p[k:]
			r.off += int64(k)
			if r.left == 0 {
				r.state = inFooter
			}
		case inFooter:
			k := copy(r.ftr[r.n:], p)
			r.n += k
			p = p[k:]
			r.off += int64(k)
			if r.n < footerLen {
				continue
			}
			if got, want := binary.LittleEndian.Uint32(r.ftr[:]), mask(r.crc); got != want {
				r.fail(fmt.Sprintf("data CRC %#08x, want %#08x (%d bytes)", got, want, r.length))
				continue
			}
			if r.skip {
				r.skipped++
			} else if err := r.decode(&pts); err != nil {
				r.fail(err.Error())
				continue
			}
			r.start, r.n, r.state = r.off, 0, inHeader
			if cap(r.data) > 64<<10 {
				r.data = nil // one large record must not pin its buffer
			}
		}
	}
	return pts, r.err
}

// Corrupt reports the error that ended the reading, or nil.
func (r *Reader) Corrupt() error { return r.err }

func (r *Reader) fail(reason string) {
	r.err = &CorruptError{Offset: r.start, Reason: reason}
	r.data = nil
}

// decode appends the scalars of the record in r.data to pts.
func (r *Reader) decode(pts *[]Point) error {
	var ev tbpb.Event
	if err := proto.Unmarshal(r.data, &ev); err != nil {
		return fmt.Errorf("not an Event: %v", err)
	}
	sum := ev.GetSummary()
	if sum == nil {
		return nil // file_version, graphs, session logs, …
	}
	wall := wallTime(ev.GetWallTime())
	for _, v := range sum.GetValue() {
		tag := v.GetTag()
		if md := v.GetMetadata(); md != nil {
			r.noteMetadata(tag, md)
		}
		var val float64
		switch x := v.GetValue().(type) {
		case *tbpb.Summary_Value_SimpleValue:
			val = float64(x.SimpleValue)
		case *tbpb.Summary_Value_Tensor:
			if scalar, known := r.scalar[tag]; known && !scalar {
				continue
			}
			f, ok := scalarTensor(x.Tensor)
			if !ok {
				continue
			}
			val = f
		default:
			continue // histograms, images, audio, or no value
		}
		*pts = append(*pts, Point{Tag: tag, Step: ev.GetStep(), Value: val, WallTime: wall})
	}
	return nil
}

// noteMetadata remembers whether a tag's series is scalar: TF2 writes the
// metadata with a tag's first value only.
func (r *Reader) noteMetadata(tag string, md *tbpb.SummaryMetadata) {
	plugin := md.GetPluginData().GetPluginName()
	if plugin == "" && md.GetDataClass() == tbpb.DataClass_DATA_CLASS_UNKNOWN {
		return // says nothing
	}
	if _, known := r.scalar[tag]; !known && len(r.scalar) >= maxTags {
		return
	}
	r.scalar[tag] = plugin == "scalars" || md.GetDataClass() == tbpb.DataClass_DATA_CLASS_SCALAR
}

// scalarTensor returns the value of a float or double tensor with one
// element, from its repeated field or its raw little-endian content.
func scalarTensor(t *tbpb.TensorProto) (float64, bool) {
	for _, d := range t.GetTensorShape().GetDim() {
		if d.GetSize() != 1 {
			return 0, false
		}
	}
	c := t.GetTensorContent()
	switch t.GetDtype() {
	case tbpb.DataType_DT_FLOAT:
		if fv := t.GetFloatVal(); len(fv) == 1 && len(c) == 0 {
			return float64(fv[0]), true
		}
		if len(c) == 4 && len(t.GetFloatVal()) == 0 {
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(c))), true
		}
	case tbpb.DataType_DT_DOUBLE:
		if dv := t.GetDoubleVal(); len(dv) == 1 && len(c) == 0 {
			return dv[0], true
		}
		if len(c) == 8 && len(t.GetDoubleVal()) == 0 {
			return math.Float64frombits(binary.LittleEndian.Uint64(c)), true
		}
	}
	return 0, false
}

// wallTime converts seconds since the epoch; a missing or absurd time is
// the zero time.
func wallTime(s float64) time.Time {
	if s <= 0 || math.IsNaN(s) || s > 1<<40 {
		return time.Time{}
	}
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}
