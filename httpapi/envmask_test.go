package httpapi

import (
	"strings"
	"testing"
)

// TestEnvReservedNames (issue 12): names that choose a run's GPUs or load
// code into it are refused at submit and rerun, 400 naming the field.
func TestEnvReservedNames(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, map[string]any{"command": []string{"true"}})
	for _, k := range []string{"CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
		"GPU_DEVICE_ORDINAL", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "RLSCHED_OUTPUT_DIR", "ld_preload", "Cuda_Device_Order"} {
		body := map[string]any{"command": []string{"true"}, "env": map[string]string{k: "0"}}
		for _, path := range []string{"/api/train", "/api/tasks/" + id + "/rerun"} {
			r := e.req("POST", path, tok, body)
			if r.status != 400 || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), "env."+k) {
				t.Errorf("%s with env %s: %d %s", path, k, r.status, r.body)
			}
		}
	}
	e.submit(tok, map[string]any{"command": []string{"true"}, "env": map[string]string{"CUDA_LAUNCH_BLOCKING": "1", "LD_LIBRARY_PATH": "/opt"}})
}

// TestEnvMasked (issue 12): a run's env values are its owner's and the
// admins' to see; everyone else gets each value as "***", in one run and in
// lists; a rerun by another user does not copy them.
func TestEnvMasked(t *testing.T) {
	e := newEnv(t)
	adminTok, _ := e.user("root") // the first user: ADMIN
	aliceTok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	id := e.submit(aliceTok, map[string]any{"command": []string{"true"}, "env": map[string]string{"WANDB_API_KEY": "s3cret", "SEED": "1"}})
	env := func(tok, path string) map[string]any {
		t.Helper()
		r := e.req("GET", path, tok, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		m := r.json(t)
		if items, ok := m["items"].([]any); ok {
			m = items[0].(map[string]any)
		}
		got, _ := m["env"].(map[string]any)
		return got
	}
	for name, tok := range map[string]string{"the owner": aliceTok, "an admin": adminTok} {
		for _, p := range []string{"/api/tasks/" + id, "/api/tasks?limit=1"} {
			if got := env(tok, p); got["WANDB_API_KEY"] != "s3cret" || got["SEED"] != "1" {
				t.Errorf("%s, %s: env %v", name, p, got)
			}
		}
	}
	for _, p := range []string{"/api/tasks/" + id, "/api/tasks?limit=1"} {
		if got := env(bobTok, p); len(got) != 2 || got["WANDB_API_KEY"] != "***" || got["SEED"] != "***" {
			t.Errorf("another user, %s: env %v", p, got)
		}
	}
	if r := e.req("GET", "/api/tasks/"+id, bobTok, nil); strings.Contains(string(r.body), "s3cret") {
		t.Errorf("the value leaks to another user: %s", r.body)
	}

	rerun := func(tok string, body any) string {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+id+"/rerun", tok, body)
		if r.status != 202 {
			t.Fatalf("rerun: %d %s", r.status, r.body)
		}
		return r.json(t)["id"].(string)
	}
	if got := e.task(rerun(bobTok, nil)).Env; len(got) != 0 {
		t.Errorf("bob's rerun copied alice's env: %v", got)
	}
	if got := e.task(rerun(bobTok, map[string]any{"env": map[string]string{"SEED": "2"}})).Env; len(got) != 1 || got["SEED"] != "2" {
		t.Errorf("bob's rerun with his own env: %v", got)
	}
	if got := e.task(rerun(aliceTok, nil)).Env; got["WANDB_API_KEY"] != "s3cret" {
		t.Errorf("alice's own rerun lost her env: %v", got)
	}
}

// TestParamsDepth (issue 12): params nested deeper than 32 levels are
// refused 400 naming params, at submit and rerun; 32 levels are fine.
func TestParamsDepth(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	nested := func(n int) string {
		return `{"command":["true"],"params":{"a":` + strings.Repeat(`[`, n-1) + `1` + strings.Repeat(`]`, n-1) + `}}`
	}
	id := e.submit(tok, nested(32))
	for _, body := range []string{nested(33), `{"command":["true"],"params":{"a":` + strings.Repeat(`{"b":`, 40) + `1` + strings.Repeat(`}`, 40) + `}}`,
		`{"command":["true"],"params":{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ in a string is no nesting"}}`} {
		want := 400
		if strings.Contains(body, "in a string") {
			want = 202
		}
		for _, path := range []string{"/api/train", "/api/tasks/" + id + "/rerun"} {
			r := e.req("POST", path, tok, body)
			if r.status != want || (want == 400 && (r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), "params"))) {
				t.Errorf("%s %.60s…: %d %s", path, body, r.status, r.body)
			}
		}
	}
}

func TestJSONDepth(t *testing.T) {
	for raw, want := range map[string]int{`1`: 0, `{}`: 1, `{"a":[1,{"b":2}]}`: 3, `["\"[[[", "\\"]`: 1,
		`{"a":"]]]]"}`: 1, `[[],[[]]]`: 3} {
		if got := jsonDepth([]byte(raw)); got != want {
			t.Errorf("jsonDepth(%s) = %d, want %d", raw, got, want)
		}
	}
}
