package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSubmit_After(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--after", "r1", "--after-ok", "r2", "--after-sweep", "s3", "--inputs-from", "r2", "--", "python3", "eval.py")
	m := h.trainBody()
	if got := jsonString(m["after"]); got != `[{"run":"r1","when":"ended"},{"run":"r2","when":"succeeded"},{"sweep":"s3","when":"ended"}]` {
		t.Errorf("after = %s", got)
	}
	if got := jsonString(m["inputsFrom"]); got != `["r2"]` {
		t.Errorf("inputsFrom = %s", got)
	}
	h.mustRun(0, "submit", "--", "python3", "train.py")
	if m := h.trainBody(); m["after"] != nil || m["inputsFrom"] != nil {
		t.Errorf("sent after %v inputsFrom %v unasked", m["after"], m["inputsFrom"])
	}
	_, errs := h.mustRun(ExitUsage, "submit", "--after", "../x", "--", "x")
	if !strings.Contains(errs, "invalid --after") {
		t.Errorf("bad --after: %q", errs)
	}
}

func TestDrawPipeline(t *testing.T) {
	var v pipelineView
	mustDecode(t, `{"id":"p1","name":"exp","user":"alice","counts":{"SUCCEEDED":3,"FAILED":1,"CANCELLED":1},"steps":[
		{"name":"train","run":"r1","status":"SUCCEEDED","after":[],"depth":0},
		{"name":"eval1","run":"r2","status":"SUCCEEDED","after":["train"],"depth":1},
		{"name":"eval2","run":"r3","status":"FAILED","after":["train"],"depth":1},
		{"name":"report","run":"r4","status":"CANCELLED","after":["eval1","eval2"],"depth":2,"reason":"dependency"},
		{"name":"plot","run":"r5","status":"SUCCEEDED","after":["train"],"depth":1}]}`, &v)
	want := `pipeline p1 "exp" of alice: 3 SUCCEEDED 1 FAILED 1 CANCELLED
train  SUCCEEDED  r1
├─ eval1  SUCCEEDED  r2
│  └─ report  CANCELLED  r4  (also after eval2)  reason dependency
├─ eval2  FAILED  r3
└─ plot  SUCCEEDED  r5
`
	if got := drawPipeline(v); got != want {
		t.Errorf("drawn:\n%s\nwant:\n%s", got, want)
	}
}

func mustDecode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatal(err)
	}
}
