package worker

import (
	"reflect"
	"syscall"
	"testing"
)

func TestParseGPUs_Success(t *testing.T) {
	f := func(in string, want []GPU) {
		t.Helper()
		got, err := parseGPUs(in)
		if err != nil {
			t.Fatalf("parseGPUs(%q): %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parseGPUs(%q)\n got %+v\nwant %+v", in, got, want)
		}
	}
	f("", nil)
	f("\n", nil)
	f("0, NVIDIA A100-SXM4-40GB, 40960 MiB\n", []GPU{{0, "NVIDIA A100-SXM4-40GB", 40960}})
	f("0, NVIDIA A100-SXM4-40GB, 40960 MiB\n1, NVIDIA A100-SXM4-40GB, 40960 MiB\n",
		[]GPU{{0, "NVIDIA A100-SXM4-40GB", 40960}, {1, "NVIDIA A100-SXM4-40GB", 40960}})
	f("3, Tesla T4, [N/A]", []GPU{{3, "Tesla T4", 0}})
	f("  2 , NVIDIA H200, 143771 MiB  \r\n", []GPU{{2, "NVIDIA H200", 143771}})
	f("0, Odd, Name, 1024 MiB", []GPU{{0, "Odd, Name", 1024}})
}

func TestParseGPUs_Failure(t *testing.T) {
	f := func(in string) {
		t.Helper()
		if got, err := parseGPUs(in); err == nil {
			t.Fatalf("parseGPUs(%q) = %+v, want an error", in, got)
		}
	}
	f("0, NVIDIA A100")
	f("x, NVIDIA A100, 40960 MiB")
	f("-1, NVIDIA A100, 40960 MiB")
	f("0, NVIDIA A100, lots")
	f("0, NVIDIA A100, -5 MiB")
}

func TestSyntheticGPUs(t *testing.T) {
	want := []GPU{{0, "gpu0", 0}, {1, "gpu1", 0}, {2, "gpu2", 0}}
	if got := SyntheticGPUs(3); !reflect.DeepEqual(got, want) {
		t.Fatalf("SyntheticGPUs(3) = %+v", got)
	}
	if got := SyntheticGPUs(0); len(got) != 0 {
		t.Fatalf("SyntheticGPUs(0) = %+v", got)
	}
}

func TestSignalName(t *testing.T) {
	if got := signalName(syscall.SIGKILL); got != "SIGKILL" {
		t.Fatalf("SIGKILL: %q", got)
	}
	if got := signalName(syscall.SIGTERM); got != "SIGTERM" {
		t.Fatalf("SIGTERM: %q", got)
	}
	if got := signalName(syscall.Signal(40)); got != "SIG40" {
		t.Fatalf("40: %q", got)
	}
}
