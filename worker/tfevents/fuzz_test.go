package tfevents

import (
	"errors"
	"math"
	"os"
	"testing"
)

// FuzzFeed: whatever the bytes, Feed never panics, and splitting the input
// in two (at a point taken from the input) changes neither the points nor
// the verdict. The input is also framed as valid records, so that the
// Event decoding behind the CRC checks is fuzzed too.
func FuzzFeed(f *testing.F) {
	for _, name := range []string{"events.out.tfevents.pytorch-strict", "events.out.tfevents.guild-loss"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	own, _ := ownFile()
	f.Add(own)
	f.Add(fileOf(nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		whole, errWhole := NewReaderSize(4096).Feed(b)
		cut := 0
		if len(b) > 0 {
			cut = int(b[0]) * len(b) / 256
		}
		split, errSplit := feedSplit(NewReaderSize(4096), b, []int{cut})
		if !samePoints(whole, split) {
			t.Fatalf("split at %d: %d points, whole: %d", cut, len(split), len(whole))
		}
		var a, c *CorruptError
		if errors.As(errWhole, &a) != errors.As(errSplit, &c) || (a != nil && *a != *c) {
			t.Fatalf("split at %d: error %v, whole: %v", cut, errSplit, errWhole)
		}
		if (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("split at %d: error %v, whole: %v", cut, errSplit, errWhole)
		}
		_, _ = NewReader().Feed(fileOf(b, b))
	})
}

// samePoints compares values by their bits, so NaN equals NaN.
func samePoints(a, b []Point) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Tag != y.Tag || x.Step != y.Step || !x.WallTime.Equal(y.WallTime) ||
			math.Float64bits(x.Value) != math.Float64bits(y.Value) {
			return false
		}
	}
	return true
}
