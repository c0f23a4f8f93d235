package core

import "testing"

func TestMaskEnv(t *testing.T) {
	orig := Task{UserID: 1, Env: map[string]string{"TOKEN": "s3cret", "SEED": "1"}}
	m := orig.MaskEnv()
	if len(m.Env) != 2 || m.Env["TOKEN"] != MaskedEnvValue || m.Env["SEED"] != MaskedEnvValue {
		t.Fatalf("masked env %v", m.Env)
	}
	if orig.Env["TOKEN"] != "s3cret" {
		t.Fatal("MaskEnv changed the task it was called on")
	}
	if (Task{}).MaskEnv().Env != nil {
		t.Fatal("an empty env came back non-nil")
	}
	for u, want := range map[User]bool{{ID: 1}: true, {ID: 2, Role: RoleAdmin}: true, {ID: 2, Role: RoleUser}: false} {
		if got := orig.EnvVisibleTo(u); got != want {
			t.Errorf("EnvVisibleTo(%+v) = %v, want %v", u, got, want)
		}
	}
}

func TestReservedEnv(t *testing.T) {
	for _, k := range []string{"RLSCHED_X", "rlsched_x", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
		"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "LD_PRELOAD", "Ld_Preload"} {
		if ReservedEnv(k) == "" {
			t.Errorf("%s is not reserved", k)
		}
	}
	for _, k := range []string{"CUDA_LAUNCH_BLOCKING", "LD_LIBRARY_PATH", "PYTHONPATH", "SEED"} {
		if why := ReservedEnv(k); why != "" {
			t.Errorf("%s is reserved: %s", k, why)
		}
	}
}
