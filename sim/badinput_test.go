package sim

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A trace of every kind of bad input the issue names, read and simulated:
// each job either finishes or is listed as skipped with its reason, and
// submissions out of order are simulated in the order they arrived.
func TestBadInputEveryJobSimulatedOrSkipped(t *testing.T) {
	csv := "job_id,user,gpu_num,submit_time,start_time,end_time,mystery\n" +
		"late,u,1,2020-09-01 02:00:00,2020-09-01 02:00:00,2020-09-01 03:00:00,x\n" + // unsorted: after early
		"early,u,1,2020-09-01 00:00:00,2020-09-01 00:00:00,2020-09-01 01:00:00,x\n" +
		"neg,u,1,2020-09-01 00:10:00,2020-09-01 01:00:00,2020-09-01 00:30:00,x\n" + // ends before it starts
		"huge,u,64,2020-09-01 00:20:00,2020-09-01 00:20:00,2020-09-01 01:20:00,x\n" + // more GPUs than any worker
		"nan,u,two,2020-09-01 00:20:00,2020-09-01 00:20:00,2020-09-01 01:20:00,x\n" +
		"short,row\n"
	tr, err := ReadHelios(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Ignored) != 1 || tr.Ignored[0] != "mystery" {
		t.Errorf("ignored columns %v, want [mystery]", tr.Ignored)
	}
	c, err := ReadCluster(strings.NewReader(`{"workers": [{"id": "w", "gpus": 1, "slots": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(c, tr, Config{})
	if err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	for _, s := range r.Skipped {
		why[s.ID] = s.Reason
	}
	for id, want := range map[string]string{"neg": "negative", "huge": "no worker has that many", "nan": "not a number", "line 7": "fields"} {
		if !strings.Contains(why[id], want) {
			t.Errorf("%s: skipped for %q, want %q", id, why[id], want)
		}
	}
	if len(r.Jobs) != 2 || r.Jobs[0].ID != "early" || r.Jobs[1].ID != "late" || len(r.Jobs)+len(r.Skipped) != 6 {
		t.Fatalf("finished %v, skipped %v: want early then late, every other job skipped", r.Jobs, r.Skipped)
	}

	// A cluster file with no workers reads, and every job is skipped with why.
	c, err = ReadCluster(strings.NewReader(`{"workers": []}`))
	if err != nil {
		t.Fatal(err)
	}
	tr, _ = ReadHelios(strings.NewReader(csv))
	r, err = Run(c, tr, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Jobs) != 0 || len(r.Skipped) != 6 || !strings.Contains(fmt.Sprint(r.Skipped), "the cluster has no workers") {
		t.Errorf("no workers: finished %v, skipped %v", r.Jobs, r.Skipped)
	}
	if s := r.Summarize(); s.Skipped != 6 || s.Allocation != 0 {
		t.Errorf("no workers: summary %+v", s)
	}
}

// bigHelios is a Helios log of size bytes made as it is read: its rows
// carry a padding column the reader ignores, so that a file of gigabytes
// is a few thousand jobs. It samples the heap as it goes.
type bigHelios struct {
	left, rows int
	pad        string
	buf        []byte
	peak       uint64
	sampled    int
}

func (b *bigHelios) Read(p []byte) (int, error) {
	if len(b.buf) == 0 {
		if b.left <= 0 {
			return 0, io.EOF
		}
		if b.rows == 0 {
			b.buf = []byte("job_id,user,gpu_num,submit_time,start_time,end_time,pad\n")
		} else {
			s := time.Date(2020, 9, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(b.rows) * time.Minute).Format(clockLayout)
			b.buf = fmt.Appendf(nil, "j%d,u%d,1,%s,%s,%s,%s\n", b.rows, b.rows%7, s, s, s, b.pad)
		}
		b.rows++
		b.left -= len(b.buf)
		if b.rows%256 == 0 {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			b.peak = max(b.peak, m.HeapInuse)
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// A trace file far larger than memory should be is read row by row: the
// heap stays near what the jobs take, not the file's size. (256 MiB here,
// to keep the test short; the reader holds one row at a time whatever
// the size, so a 2 GB file reads the same way.)
func TestReadHeliosStreamsALargeFile(t *testing.T) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapInuse
	const size = 256 << 20
	b := &bigHelios{left: size, pad: strings.Repeat("p", 64<<10)}
	tr, err := ReadHelios(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := b.rows - 1; len(tr.Jobs) != want || len(tr.Skipped) != 0 {
		t.Fatalf("%d jobs, %d skipped; want %d jobs", len(tr.Jobs), len(tr.Skipped), want)
	}
	if grew := int64(b.peak) - int64(base); grew > 32<<20 {
		t.Errorf("reading %d MiB the heap grew by %d MiB: the file is not streamed", size>>20, grew>>20)
	}
}
