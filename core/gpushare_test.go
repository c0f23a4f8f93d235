package core

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheckGPUs_Success(t *testing.T) {
	f := func(in float64, whole int, frac float64) {
		t.Helper()
		w, fr, err := CheckGPUs(in, 64)
		if err != nil || w != whole || fr != frac {
			t.Fatalf("CheckGPUs(%v) = %d, %v, %v; want %d, %v", in, w, fr, err, whole, frac)
		}
	}
	f(0, 0, 0)
	f(2, 2, 0)
	f(0.25, 0, 0.25)
	f(0.5, 0, 0.5)
	f(0.07, 0, 0.07)
	f(0.99, 0, 0.99)
}

func TestCheckGPUs_Failure(t *testing.T) {
	f := func(in float64, want string) {
		t.Helper()
		_, _, err := CheckGPUs(in, 64)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("CheckGPUs(%v) = %v, want an error with %q", in, err, want)
		}
	}
	f(0.333, "two decimals")
	f(-0.5, "0 or more")
	f(1.5, "not supported")
	f(65, "0..64")
	f(0.001, "two decimals")
}

func TestTaskJSONCombinesGPUs(t *testing.T) {
	f := func(in Task, want string) {
		t.Helper()
		b, err := json.Marshal(in)
		if err != nil || !strings.Contains(string(b), want) {
			t.Fatalf("Marshal = %s, %v; want %s in it", b, err, want)
		}
		var back Task
		if err := json.Unmarshal(b, &back); err != nil || back.GPUs != in.GPUs || back.GPUFraction != in.GPUFraction {
			t.Fatalf("Unmarshal(%s) = %d, %v, %v", b, back.GPUs, back.GPUFraction, err)
		}
	}
	f(Task{GPUs: 2}, `"gpus":2}`)
	f(Task{GPUFraction: 0.25}, `"gpus":0.25}`)
	f(Task{}, `"gpus":0}`)
}

func TestMatchConstraints(t *testing.T) {
	labels := map[string]string{"pool": "a100", "host": "g1"}
	f := func(c map[string]string, want bool) {
		t.Helper()
		if got := MatchConstraints(labels, c); got != want {
			t.Fatalf("MatchConstraints(%v) = %v, want %v", c, got, want)
		}
	}
	f(nil, true)
	f(map[string]string{"pool": "a100"}, true)
	f(map[string]string{"pool": "rtx"}, false)
	f(map[string]string{"!pool": "interactive"}, true)
	f(map[string]string{"!pool": "a100"}, false)
	f(map[string]string{"zone": "x"}, false)
	f(map[string]string{"!zone": "x"}, true) // no such label: it is not x
	if !MatchGPUType("NVIDIA A100-SXM4-80GB", []string{"rtx", "a100"}) || MatchGPUType("NVIDIA GeForce RTX 4090", []string{"A100"}) {
		t.Fatal("MatchGPUType: a case-insensitive substring of the name")
	}
	if err := CheckConstraints(map[string]string{"bad key": "x"}); err == nil {
		t.Fatal("CheckConstraints: a key with a blank passed")
	}
}
