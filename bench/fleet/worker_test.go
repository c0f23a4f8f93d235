package fleet

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
)

func TestOvercommitSeesSharesWholeRunsAndMemory(t *testing.T) {
	w := &worker{f: &Fleet{cfg: Config{GPUMemoryMB: 16000}}, id: "w1"}
	w.runs = []*run{
		{id: "a", gpus: []int32{0}, share: 50, shareMB: 8000},
		{id: "b", gpus: []int32{0}, share: 25, shareMB: 4000},
		{id: "c", gpus: []int32{1}},
		{id: "ended", gpus: []int32{2}, finSent: true}, // reported ended: holds nothing
	}
	for _, c := range []struct {
		m    *pb.ExecuteTask
		want string // "" or a part of the sentence
	}{
		{&pb.ExecuteTask{TaskId: "x", GpuIndices: []int32{0}, GpuFraction: 0.25, GpuMemoryMb: 4000}, ""},
		{&pb.ExecuteTask{TaskId: "x", GpuIndices: []int32{0}, GpuFraction: 0.26, GpuMemoryMb: 1000}, "share of 0.26 on top of the 0.75"},
		{&pb.ExecuteTask{TaskId: "x", GpuIndices: []int32{0}, GpuFraction: 0.2, GpuMemoryMb: 4001}, "4001 MiB on top of the 12000 MiB"},
		{&pb.ExecuteTask{TaskId: "x", GpuIndices: []int32{0}}, "whole while 2 runs hold it"},
		{&pb.ExecuteTask{TaskId: "x", GpuIndices: []int32{1}, GpuFraction: 0.5}, "holds it whole"},
		{&pb.ExecuteTask{TaskId: "x", GpuIndices: []int32{2, 3}}, ""},
		{&pb.ExecuteTask{TaskId: "a", GpuIndices: []int32{0}, GpuFraction: 0.5, GpuMemoryMb: 8000}, ""}, // a resend of a held run
	} {
		got := w.overcommit(c.m)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.m, got, c.want)
		}
	}
}

func TestLabelsOnlyWhenAsked(t *testing.T) {
	plain := &worker{f: &Fleet{cfg: Config{GPUs: 8}}, idx: 3}
	if l := plain.labels(); l != nil {
		t.Errorf("a plain fleet's labels: %v", l)
	}
	w := &worker{f: &Fleet{cfg: Config{GPUs: 2, GPUName: "T4", CPUMillis: 104000, Labels: map[string]string{"pool": "t4"}}}, idx: 3}
	l := w.labels()
	if l["gpu.type"] != "T4" || l["gpu.count"] != "2" || l["cpu.count"] != "104" || l["host"] != "sim-3" || l["pool"] != "t4" || len(l) != 5 {
		t.Errorf("labels: %v", l)
	}
}
