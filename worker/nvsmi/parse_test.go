package nvsmi

import (
	"reflect"
	"strings"
	"testing"
)

const u0, u1 = "GPU-fa4e0000-0000-4000-8000-000000000000", "GPU-fa4e0001-0000-4000-8000-000000000001"

func TestParseGPUs(t *testing.T) {
	f := func(in string, want []GPU, wantWarn ...string) {
		t.Helper()
		got, warns := ParseGPUs([]byte(in))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseGPUs(%q)\n got %+v\nwant %+v", in, got, want)
		}
		if len(warns) != len(wantWarn) {
			t.Fatalf("ParseGPUs(%q) warnings %q, want %d like %q", in, warns, len(wantWarn), wantWarn)
		}
		for i, w := range wantWarn {
			if !strings.Contains(warns[i], w) {
				t.Fatalf("ParseGPUs(%q) warning %d = %q, want it to contain %q", in, i, warns[i], w)
			}
		}
	}
	a100 := func(idx int, uuid string, used int64, util int) GPU {
		return GPU{Index: idx, UUID: uuid, Name: "NVIDIA A100-SXM4-40GB", MemoryTotalMB: 40960, MemoryUsedMB: used, UtilizationPct: util}
	}
	// Empty output: no GPUs, no complaint.
	f("", nil)
	f("\n\r\n  \n", nil)
	f("0, "+u0+", NVIDIA A100-SXM4-40GB, 40960, 1200, 37\n", []GPU{a100(0, u0, 1200, 37)})
	f("0, "+u0+", NVIDIA A100-SXM4-40GB, 40960, 0, 0\n1, "+u1+", NVIDIA A100-SXM4-40GB, 40960, 39000, 100\n",
		[]GPU{a100(0, u0, 0, 0), a100(1, u1, 39000, 100)})
	// Extra spaces and CRLF.
	f("   1 ,   "+u1+"  ,  NVIDIA A100-SXM4-40GB  ,   40960 ,  5  ,   3   \r\n", []GPU{a100(1, u1, 5, 3)})
	// A name with commas.
	f("0, "+u0+", Odd, Name, Inc, 1024, 1, 2", []GPU{{0, u0, "Odd, Name, Inc", 1024, 1, 2}})
	// Units, from an nvidia-smi that ignores nounits.
	f("0, "+u0+", NVIDIA A100-SXM4-40GB, 40960 MiB, 12 MiB, 7 %", []GPU{a100(0, u0, 12, 7)})
	// A header, from one that ignores noheader.
	f("index, uuid, name, memory.total [MiB], memory.used [MiB], utilization.gpu [%]\n0, "+u0+", NVIDIA A100-SXM4-40GB, 40960, 0, 0",
		[]GPU{a100(0, u0, 0, 0)})
	// Not reported: Unknown, without a warning.
	f("0, "+u0+", NVIDIA A100-SXM4-40GB, 40960, [N/A], [N/A]", []GPU{a100(0, u0, Unknown, Unknown)})
	f("0, "+u0+", Tesla K80, N/A, [Not Supported], [Unknown Error]", []GPU{{0, u0, "Tesla K80", Unknown, Unknown, Unknown}})
	f("0, "+u0+", X, , , ", []GPU{{0, u0, "X", Unknown, Unknown, Unknown}})
	// Unreadable values: Unknown, with a warning that names the GPU and field.
	f("0, "+u0+", X, 40960, lots, 37", []GPU{{0, u0, "X", 40960, Unknown, 37}}, `GPU 0 memory.used "lots"`)
	f("0, "+u0+", X, 40960, 1, 101", []GPU{{0, u0, "X", 40960, 1, Unknown}}, `GPU 0 utilization.gpu "101"`)
	f("0, "+u0+", X, -5, 1, 2", []GPU{{0, u0, "X", Unknown, 1, 2}}, `GPU 0 memory.total "-5"`)
	// Short and unusable rows are left out; the others stay.
	f("0, "+u0+"\n1, "+u1+", NVIDIA A100-SXM4-40GB, 40960, 0, 0", []GPU{a100(1, u1, 0, 0)}, "row 1: 2 fields, want 6")
	f("x, "+u0+", X, 1, 1, 1", nil, `row 1: index "x"`)
	f("-1, "+u0+", X, 1, 1, 1", nil, `index "-1"`)
	f("0, [N/A], X, 1, 1, 1", []GPU{{0, "", "X", 1, 1, 1}}, "GPU 0 has no UUID")
	f("0, "+u0+", X, 1, 1, 1\n0, "+u1+", Y, 2, 2, 2", []GPU{{0, u0, "X", 1, 1, 1}}, "GPU 0 listed twice")
	// nvidia-smi's own complaint where rows belong: warned, bounded.
	f("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", nil, "row 1: 1 fields")
	f(strings.Repeat("garbage\n", 100), nil, "row 1", "row 2", "row 3", "row 4", "96 more rows like these")
}

func TestParseApps(t *testing.T) {
	f := func(in string, want []App, wantWarn ...string) {
		t.Helper()
		got, warns := ParseApps([]byte(in))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseApps(%q)\n got %+v\nwant %+v", in, got, want)
		}
		if len(warns) != len(wantWarn) {
			t.Fatalf("ParseApps(%q) warnings %q, want %d like %q", in, warns, len(wantWarn), wantWarn)
		}
		for i, w := range wantWarn {
			if !strings.Contains(warns[i], w) {
				t.Fatalf("ParseApps(%q) warning %d = %q, want it to contain %q", in, i, warns[i], w)
			}
		}
	}
	f("", nil) // no processes
	f("No running processes found\n", nil)
	f(u0+", 4242, 1100\n"+u1+", 77, 3", []App{{u0, 4242, 1100}, {u1, 77, 3}})
	f("  "+u0+"  ,   4242 ,  1100 MiB \r\n", []App{{u0, 4242, 1100}})
	f("gpu_uuid, pid, used_gpu_memory [MiB]\n"+u0+", 4242, 1100", []App{{u0, 4242, 1100}})
	f(u0+", 4242, [N/A]\n"+u0+", 4243, [Not Supported]", []App{{u0, 4242, Unknown}, {u0, 4243, Unknown}})
	// Without a pid a process cannot be told apart: left out, never guessed.
	f(u0+", [N/A], 1100", nil, `pid "[N/A]"`)
	f(u0+", 0, 1100", nil, `pid "0"`)
	f("[N/A], 4242, 1100", nil, "process 4242 has no GPU UUID")
	f(u0+", 4242", nil, "row 1: 2 fields, want 3")
	f(u0+", 4242, 1, python", nil, "row 1: 4 fields, want 3")
	f(u0+", 4242, much", []App{{u0, 4242, Unknown}}, `used_memory "much"`)
}

// FuzzParse holds both parsers to their contract on any output: no panic,
// values either Unknown or in range, every GPU index once, every pid > 0.
func FuzzParse(f *testing.F) {
	f.Add("0, " + u0 + ", NVIDIA A100-SXM4-40GB, 40960, 1200, 37\n")
	f.Add(u0 + ", 4242, 1100\r\n")
	f.Add("0, [N/A], a, b, c, [N/A], 1, 2")
	f.Fuzz(func(t *testing.T, in string) {
		gpus, _ := ParseGPUs([]byte(in))
		seen := map[int]bool{}
		for _, g := range gpus {
			if g.Index < 0 || seen[g.Index] {
				t.Fatalf("bad or repeated index in %+v", gpus)
			}
			seen[g.Index] = true
			if g.UtilizationPct < Unknown || g.UtilizationPct > 100 || g.MemoryUsedMB < Unknown || g.MemoryTotalMB < Unknown {
				t.Fatalf("value out of range in %+v", g)
			}
		}
		apps, _ := ParseApps([]byte(in))
		for _, a := range apps {
			if a.PID <= 0 || a.GPUUUID == "" || a.UsedMemoryMB < Unknown {
				t.Fatalf("bad app %+v", a)
			}
		}
	})
}

func TestPrintable(t *testing.T) {
	f := func(in string, limit int, want string) {
		t.Helper()
		if got := printable(in, limit); got != want {
			t.Fatalf("printable(%q, %d) = %q, want %q", in, limit, got, want)
		}
	}
	f("python train.py --lr 0.1", 200, "python train.py --lr 0.1")
	f("a\x1b[31mred\x07\n", 200, "a[31mred")
	f("evil\u202egnp.exe", 200, "evilgnp.exe")
	f("bad \xff utf8", 200, "bad \uFFFD utf8")
	f(strings.Repeat("é", 150), 200, strings.Repeat("é", 100))
	f(strings.Repeat("x", 300), 200, strings.Repeat("x", 200))
}
