package gpuwatch

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

// The heartbeat benchmarks measure one 8-GPU worker's GPU sample on the
// wire as codec/pb encodes it (Heartbeat.gpus, generated code): the
// worker's encoding, and the master's decoding plus every rule of this
// package, 4 runs of 2 GPUs each. Compare the master's ns/op
// with the CPU per heartbeat of BENCHMARKS.md's heartbeat scenario (the
// issue's target: ≤ 5 % more).

const (
	utilUnknown = 255
	memUnknown  = 1<<32 - 1
)

var helloIndices = []int{0, 1, 2, 3, 4, 5, 6, 7}

var benchRuns = []Run{
	{ID: "run-aaaaaaaaaaaa", GPUs: []int{0, 1}}, {ID: "run-bbbbbbbbbbbb", GPUs: []int{2, 3}},
	{ID: "run-cccccccccccc", GPUs: []int{4, 5}}, {ID: "run-dddddddddddd", GPUs: []int{6, 7}},
}

// workerSample fills m as a worker would for one sample; foreign adds two
// foreign processes (as in the heartbeat right after they appeared).
func workerSample(m *pb.GpuSample, seq int, foreign bool) {
	m.UtilPct, m.MemoryUsedMb = m.UtilPct[:0], m.MemoryUsedMb[:0]
	for i := range helloIndices {
		m.UtilPct = append(m.UtilPct, uint32((seq+i*13)%101))
		m.MemoryUsedMb = append(m.MemoryUsedMb, uint32(20000+seq%1000+i))
	}
	m.Foreign, m.Problem = nil, nil
	if foreign {
		m.Foreign = &pb.ForeignList{Procs: []*pb.ForeignProc{
			{GpuIndex: 1, Pid: uint32(40000 + seq), User: "bob", Command: "python /home/bob/jupyter/kernel.py --port 8888", MemoryMb: 1200},
			{GpuIndex: 5, Pid: uint32(50000 + seq), User: "alice", Command: "python train.py --lr 0.001 --batch 256", MemoryMb: 30000},
		}}
	}
}

// masterState is what the master keeps per worker session for this
// decoding: the last foreign list, per GPU, which a sample without one
// leaves unchanged.
type masterState struct {
	msg     pb.GpuSample
	sample  Sample
	foreign [][]Proc
	watch   *Watch
	out     Result
}

func newMasterState() *masterState {
	st := &masterState{watch: NewWatch(DefaultConfig()), foreign: make([][]Proc, len(helloIndices))}
	st.sample.GPUs = make([]GPU, len(helloIndices))
	return st
}

// handle decodes one sample and applies the rules, as the master would.
func (st *masterState) handle(b []byte, now time.Time) error {
	// protobuf-go allocates each packed field's slice on every decode
	// (impl.growInt32Slice), reused message or not: 2 allocations a sample.
	if err := proto.Unmarshal(b, &st.msg); err != nil {
		return err
	}
	if f := st.msg.Foreign; f != nil {
		for i := range st.foreign {
			st.foreign[i] = st.foreign[i][:0]
		}
		for _, p := range f.Procs {
			if pos := int(p.GpuIndex); pos < len(st.foreign) {
				mem := int64(p.MemoryMb)
				if p.MemoryMb == memUnknown {
					mem = Unknown
				}
				st.foreign[pos] = append(st.foreign[pos], Proc{PID: int(p.Pid), User: p.User, Command: p.Command, MemoryMB: mem})
			}
		}
	}
	for i, idx := range helloIndices {
		g := GPU{Index: idx, UtilPct: Unknown, MemoryUsedMB: Unknown, Foreign: st.foreign[i]}
		if i < len(st.msg.UtilPct) && st.msg.UtilPct[i] != utilUnknown {
			g.UtilPct = int(st.msg.UtilPct[i])
		}
		if i < len(st.msg.MemoryUsedMb) && st.msg.MemoryUsedMb[i] != memUnknown {
			g.MemoryUsedMB = int64(st.msg.MemoryUsedMb[i])
		}
		st.sample.GPUs[i] = g
	}
	st.watch.Observe(now, st.sample, benchRuns, &st.out)
	return nil
}

func TestHeartbeatSampleSize(t *testing.T) {
	var m pb.GpuSample
	workerSample(&m, 7, false)
	steady, _ := proto.Marshal(&m)
	workerSample(&m, 7, true)
	withForeign, _ := proto.Marshal(&m)
	// 8 GPUs: 2+8 bytes of utilisation, 2+24 of memory.
	if len(steady) > 40 {
		t.Fatalf("an 8-GPU sample takes %d bytes on the wire, want ≤ 40", len(steady))
	}
	t.Logf("8-GPU sample: %d bytes; with two foreign processes: %d bytes", len(steady), len(withForeign))

	st := newMasterState()
	if err := st.handle(withForeign, t0); err != nil {
		t.Fatal(err)
	}
	if len(st.out.Points) != 8 || len(st.out.Warnings) != 2 || fmt.Sprint(st.out.Foreign) != "[1 5]" {
		t.Fatalf("decoded result %+v", st.out)
	}
	// The next sample has no foreign list: unchanged, still there.
	if err := st.handle(steady, t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st.out.Foreign) != "[1 5]" || len(st.out.Warnings) != 0 {
		t.Fatalf("after an unchanged sample %+v", st.out)
	}
}

func benchEncode(b *testing.B, foreign bool) {
	var (
		m   pb.GpuSample
		buf []byte
		err error
	)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		workerSample(&m, i, foreign)
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], &m); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0)
	b.SetBytes(int64(len(buf)))
}

func benchMaster(b *testing.B, foreign bool) {
	const variants = 64
	frames := make([][]byte, variants)
	var m pb.GpuSample
	for i := range frames {
		workerSample(&m, i, foreign)
		frames[i], _ = proto.Marshal(&m)
	}
	st := newMasterState()
	now := t0
	b.SetBytes(int64(len(frames[0])))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		now = now.Add(10 * time.Second)
		if err := st.handle(frames[i%variants], now); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0)
}

// reportCPU adds the process's CPU time per op since cpu0: on a loaded
// machine ns/op counts the time other processes held the cores, cpu-ns/op
// does not (it includes the GC's work, which allocations cost).
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if cpu0 >= 0 {
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

func BenchmarkHeartbeatGPUsEncode(b *testing.B) {
	b.Run("steady", func(b *testing.B) { benchEncode(b, false) })
	b.Run("foreign", func(b *testing.B) { benchEncode(b, true) })
}

func BenchmarkHeartbeatGPUsMaster(b *testing.B) {
	b.Run("steady", func(b *testing.B) { benchMaster(b, false) })
	// Every sample brings a changed foreign list with new pids: the worst
	// case, two warnings a heartbeat.
	b.Run("foreign", func(b *testing.B) { benchMaster(b, true) })
}
