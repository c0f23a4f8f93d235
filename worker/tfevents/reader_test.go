package tfevents

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/worker/tfevents/tbpb"
)

// feedAll feeds b in one call and fails on an error.
func feedAll(t *testing.T, b []byte) []Point {
	t.Helper()
	r := NewReader()
	pts, err := r.Feed(b)
	if err != nil {
		t.Fatalf("Feed: %v", err)
	}
	if r.Offset() != int64(len(b)) {
		t.Fatalf("Offset after the whole file = %d, want %d", r.Offset(), len(b))
	}
	return pts
}

// feedSplit feeds b in the pieces cut at the given offsets.
func feedSplit(r *Reader, b []byte, cuts []int) ([]Point, error) {
	var all []Point
	prev := 0
	for _, c := range append(cuts, len(b)) {
		pts, err := r.Feed(b[prev:c])
		all = append(all, pts...)
		if err != nil {
			return all, err
		}
		prev = c
	}
	return all, nil
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Files written by real TensorBoard writers (testdata/README.md).
func TestRealWriters(t *testing.T) {
	// torch.utils.tensorboard.SummaryWriter: add_scalar("strict/foo",
	// torch.rand([]) + 1, 5 * step) for 100 steps, seed 0.
	pts := feedAll(t, readFixture(t, "events.out.tfevents.pytorch-strict"))
	if len(pts) != 100 {
		t.Fatalf("PyTorch file: %d points, want 100", len(pts))
	}
	day := time.Date(2021, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, p := range pts {
		if p.Tag != "strict/foo" || p.Step != int64(5*i) || p.Value < 1 || p.Value >= 2 ||
			p.WallTime.Before(day) || p.WallTime.After(day.Add(24*time.Hour)) {
			t.Fatalf("PyTorch file point %d = %+v, want strict/foo at step %d in [1, 2) on 2021-06-01", i, p, 5*i)
		}
	}
	// The first torch.rand() after manual_seed(0), as float32.
	if want := float64(float32(1.4962565898895264)); pts[0].Value != want {
		t.Fatalf("first PyTorch value = %v, want %v", pts[0].Value, want)
	}

	// Guild AI's SummaryWriter over TensorBoard's EventFileWriter: one
	// "loss" with neither step nor wall time.
	pts = feedAll(t, readFixture(t, "events.out.tfevents.guild-loss"))
	want := []Point{{Tag: "loss", Value: float64(float32(0.5280320048332214))}}
	if !reflect.DeepEqual(pts, want) {
		t.Fatalf("Guild file = %+v, want %+v", pts, want)
	}
}

// The TF2 layout: scalar tensors, metadata on a tag's first value only.
func ownFile() ([]byte, []Point) {
	w := func(s float64) time.Time { return wallTime(s) }
	b := fileOf(
		fileVersion(),
		event(1, 1700000001.25,
			tensor("loss", floatVal(0.5), scalarsMeta()),
			tensor("lr", doubleContent(1e-3), plugin("scalars")),
			tensor("text", &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT, FloatVal: []float32{7}}, plugin("text")),
			tensor("hist", &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT, FloatVal: []float32{1, 2, 3},
				TensorShape: &tbpb.TensorShapeProto{Dim: []*tbpb.TensorShapeProto_Dim{{Size: 3}}}}, plugin("histograms")),
			tensor("classed", floatContent(4), &tbpb.SummaryMetadata{DataClass: tbpb.DataClass_DATA_CLASS_SCALAR}),
		),
		event(2, 1700000002.5,
			tensor("loss", floatContent(0.25), nil), // no metadata: known scalar
			tensor("text", floatVal(8), nil),        // no metadata: known not scalar
			tensor("lr", &tbpb.TensorProto{Dtype: tbpb.DataType_DT_DOUBLE, DoubleVal: []float64{2e-3},
				TensorShape: &tbpb.TensorShapeProto{Dim: []*tbpb.TensorShapeProto_Dim{{Size: 1}, {Size: 1}}}}, nil),
			simple("reward", -3.5),
		),
		eventRaw(3, 1700000003, histoValue("weights")), // a histogram: no point
		event(4, 0,
			tensor("untagged-meta", floatVal(9), nil),                             // never had metadata: a scalar
			tensor("loss", &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT}, nil), // no value: none
			tensor("loss", &tbpb.TensorProto{Dtype: tbpb.DataType_DT_FLOAT, FloatVal: []float32{1}, TensorContent: []byte{0, 0, 0, 0}}, nil),
			simple("nan", float32(math.Inf(1))),
		),
	)
	return b, []Point{
		{Tag: "loss", Step: 1, Value: 0.5, WallTime: w(1700000001.25)},
		{Tag: "lr", Step: 1, Value: 1e-3, WallTime: w(1700000001.25)},
		{Tag: "classed", Step: 1, Value: 4, WallTime: w(1700000001.25)},
		{Tag: "loss", Step: 2, Value: 0.25, WallTime: w(1700000002.5)},
		{Tag: "lr", Step: 2, Value: 2e-3, WallTime: w(1700000002.5)},
		{Tag: "reward", Step: 2, Value: -3.5, WallTime: w(1700000002.5)},
		{Tag: "untagged-meta", Step: 4, Value: 9},
		{Tag: "nan", Step: 4, Value: math.Inf(1)},
	}
}

func TestOwnWriter(t *testing.T) {
	b, want := ownFile()
	if got := feedAll(t, b); !reflect.DeepEqual(got, want) {
		t.Fatalf("points =\n%+v\nwant\n%+v", got, want)
	}
	if wantWall := time.Date(2023, 11, 14, 22, 13, 21, 250_000_000, time.UTC); !want[0].WallTime.Equal(wantWall) {
		t.Fatalf("wall time 1700000001.25 = %v, want %v", want[0].WallTime, wantWall)
	}
}

// Byte by byte, and at random cuts, the points are those of one Feed.
func TestSplitFeeds(t *testing.T) {
	own, _ := ownFile()
	for name, b := range map[string][]byte{
		"pytorch": readFixture(t, "events.out.tfevents.pytorch-strict"),
		"own":     own,
	} {
		whole := feedAll(t, b)
		cuts := make([]int, 0, len(b))
		for i := 1; i < len(b); i++ {
			cuts = append(cuts, i)
		}
		r := NewReader()
		got, err := feedSplit(r, b, cuts)
		if err != nil || !reflect.DeepEqual(got, whole) {
			t.Fatalf("%s byte by byte: %d points, %v; want the %d of one Feed", name, len(got), err, len(whole))
		}
		rnd := rand.New(rand.NewPCG(1, 2))
		for try := range 50 {
			var cuts []int
			for c := rnd.IntN(40); c < len(b); c += 1 + rnd.IntN(60) {
				cuts = append(cuts, c)
			}
			got, err := feedSplit(NewReader(), b, cuts)
			if err != nil || !reflect.DeepEqual(got, whole) {
				t.Fatalf("%s cut at %v (try %d): %d points, %v; want %d", name, cuts, try, len(got), err, len(whole))
			}
		}
	}
}

// A file cut anywhere gives the points of its complete records and no
// error; Offset is the end of the last complete record; the rest of the
// bytes completes it.
func TestTruncatedTail(t *testing.T) {
	recs := [][]byte{fileVersion(), event(1, 1, simple("a", 1)), event(2, 2, simple("a", 2))}
	b := fileOf(recs...)
	var ends []int // end offset of each record
	off := 0
	for _, r := range recs {
		off += 16 + len(r)
		ends = append(ends, off)
	}
	for cut := 0; cut <= len(b); cut++ {
		r := NewReader()
		pts, err := r.Feed(b[:cut])
		if err != nil {
			t.Fatalf("file cut at %d: %v, want no error", cut, err)
		}
		complete, last := 0, 0
		for _, e := range ends {
			if e <= cut {
				complete, last = complete+1, e
			}
		}
		wantPts := max(complete-1, 0) // the file_version record has none
		if len(pts) != wantPts || r.Offset() != int64(last) {
			t.Fatalf("file cut at %d: %d points, Offset %d; want %d, %d", cut, len(pts), r.Offset(), wantPts, last)
		}
		rest, err := r.Feed(b[cut:])
		if err != nil || len(pts)+len(rest) != 2 {
			t.Fatalf("file cut at %d, then the rest: %d more points, %v", cut, len(rest), err)
		}
	}
}

func TestCorrupt(t *testing.T) {
	good := event(1, 1, simple("a", 1))
	b := fileOf(good, good, good)
	rec := 16 + len(good)
	for _, c := range []struct {
		name   string
		at     int // byte to flip
		reason string
	}{
		{"length", rec + 3, "length CRC"},
		{"length CRC", rec + 9, "length CRC"},
		{"data", rec + 12 + 4, "data CRC"},
		{"data CRC", 2*rec - 1, "data CRC"},
	} {
		bad := bytes.Clone(b)
		bad[c.at] ^= 0x40
		r := NewReader()
		pts, err := r.Feed(bad)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Offset != int64(rec) || !strings.Contains(err.Error(), c.reason) ||
			!strings.Contains(err.Error(), "offset "+strconv.Itoa(rec)) {
			t.Fatalf("%s flipped: error %v, want a CorruptError at offset %d naming the %s", c.name, err, rec, c.reason)
		}
		if len(pts) != 1 {
			t.Fatalf("%s flipped: %d points, want the 1 before the corrupt record", c.name, len(pts))
		}
		// Sticky, and the reader reads nothing more.
		pts, err2 := r.Feed(fileOf(good))
		if err2 != err || len(pts) != 0 {
			t.Fatalf("%s flipped, next Feed = %d points, %v; want the same error", c.name, len(pts), err2)
		}
		// Byte by byte, the same verdict.
		cuts := make([]int, 0, len(bad))
		for i := 1; i < len(bad); i++ {
			cuts = append(cuts, i)
		}
		pts, err = feedSplit(NewReader(), bad, cuts)
		if !errors.As(err, &ce) || ce.Offset != int64(rec) || len(pts) != 1 {
			t.Fatalf("%s flipped, byte by byte: %d points, %v", c.name, len(pts), err)
		}
	}
}

// Framing intact, data not an Event: corrupt, at that record.
func TestNotAnEvent(t *testing.T) {
	b := fileOf(fileVersion(), []byte{0xff, 0xff, 0xff})
	_, err := NewReader().Feed(b)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != int64(16+len(fileVersion())) || !strings.Contains(err.Error(), "not an Event") {
		t.Fatalf("garbage data: %v, want a CorruptError 'not an Event' at the second record", err)
	}
}

func TestEmpty(t *testing.T) {
	r := NewReader()
	if pts, err := r.Feed(nil); err != nil || len(pts) != 0 || r.Offset() != 0 {
		t.Fatalf("zero-length file: %v, %v, offset %d", pts, err, r.Offset())
	}
	// A record of zero bytes is an empty Event: valid, no points.
	b := fileOf(nil, event(3, 3, simple("a", 1)))
	if pts := feedAll(t, b); len(pts) != 1 || pts[0].Step != 3 {
		t.Fatalf("zero-length record then a scalar: %+v", pts)
	}
}

// A record over the limit is checked and skipped, not held; the scalars
// after it are read.
func TestLargeRecordSkipped(t *testing.T) {
	big := marshal(&tbpb.Event{What: &tbpb.Event_FileVersion{FileVersion: strings.Repeat("x", 5000)}})
	b := fileOf(big, event(1, 1, simple("after", 2)))
	r := NewReaderSize(1024)
	cuts := []int{100, 2000, 4000}
	pts, err := feedSplit(r, b, cuts)
	if err != nil || len(pts) != 1 || pts[0].Tag != "after" || r.Skipped() != 1 {
		t.Fatalf("large record: %+v, %v, skipped %d; want the scalar after it, 1 skipped", pts, err, r.Skipped())
	}
	if cap(r.data) > 1024 {
		t.Fatalf("the reader holds a %d-byte buffer for a skipped record", cap(r.data))
	}
	bad := bytes.Clone(b)
	bad[3000] ^= 1
	_, err = feedSplit(NewReaderSize(1024), bad, cuts)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != 0 || !strings.Contains(err.Error(), "data CRC") {
		t.Fatalf("corrupt large record: %v, want a data CRC error at offset 0", err)
	}
}

func TestMaskedCRC(t *testing.T) {
	// TensorFlow's crc32c_test: the CRC-32C of 32 zero bytes is 0x8a9136aa;
	// masking rotates right by 15 and adds 0xa282ead8.
	c := uint32(0x8a9136aa)
	if got, want := MaskedCRC(make([]byte, 32)), (c>>15|c<<17)+0xa282ead8; got != want {
		t.Fatalf("MaskedCRC(32 zeros) = %#x, want %#x", got, want)
	}
}
