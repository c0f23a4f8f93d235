package core

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestTaskView(t *testing.T) {
	b, err := json.Marshal(Task{ID: "r1", Fence: 42, Params: json.RawMessage("not json")}.View())
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"params":{}`, `"command":[]`, `"env":{}`, `"tags":[]`, `"gpuIndices":[]`} {
		if !strings.Contains(s, want) {
			t.Errorf("%s lacks %s", s, want)
		}
	}
	if strings.Contains(s, "fence") || strings.Contains(s, "42") {
		t.Errorf("the view shows the fence: %s", s)
	}
}

func TestTaskMaskedEnv(t *testing.T) {
	run := Task{UserID: 3, Env: map[string]string{"TOKEN": "s3cret", "SEED": "1"}}
	m := run.MaskedEnv()
	if m.Env["TOKEN"] != MaskedValue || m.Env["SEED"] != MaskedValue || len(m.Env) != 2 {
		t.Fatalf("masked env %v", m.Env)
	}
	if run.Env["TOKEN"] != "s3cret" {
		t.Fatal("MaskedEnv changed the run's own map")
	}
	f := func(u User, want bool) {
		t.Helper()
		if got := run.EnvVisibleTo(u); got != want {
			t.Errorf("EnvVisibleTo(%+v) = %v, want %v", u, got, want)
		}
	}
	f(User{ID: 3, Role: RoleUser}, true)
	f(User{ID: 4, Role: RoleAdmin}, true)
	f(User{ID: 4, Role: RoleUser}, false)
	f(User{}, false)
	if (Task{}).EnvVisibleTo(User{}) {
		t.Error("a run without owner is visible to the zero user")
	}
}

func TestWorkerView(t *testing.T) {
	b, _ := json.Marshal(WorkerInfo{ID: "w"}.View())
	if s := string(b); !strings.Contains(s, `"gpus":[]`) || !strings.Contains(s, `"runningTasks":[]`) {
		t.Fatalf("worker view %s", s)
	}
}

func TestReservedEnv(t *testing.T) {
	for _, k := range []string{"RLSCHED_X", "rlsched_x", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
		"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "LD_PRELOAD", "Ld_Preload",
		"LD_AUDIT", "ld_audit", "LD_DEBUG_OUTPUT", "LD_PROFILE", "LD_SOMETHING_NEW", "GLIBC_TUNABLES", "GCONV_PATH",
		"HOSTALIASES", "MALLOC_TRACE", "Nlspath", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "cuda_mps_pipe_directory"} {
		if ReservedEnv(k) == "" {
			t.Errorf("%s is not reserved", k)
		}
	}
	for _, k := range []string{"CUDA_LAUNCH_BLOCKING", "LD_LIBRARY_PATH", "ld_library_path", "PYTHONPATH", "SEED", "OLD_LD", "TZ"} {
		if why := ReservedEnv(k); why != "" {
			t.Errorf("%s is reserved: %s", k, why)
		}
	}
}
