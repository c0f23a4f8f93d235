package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// A run's container image (issue 27; docs/API.md "Container images") is on
// its Task through submit, rerun (kept, replaced or dropped) and a sweep's
// members.
func TestImage_Success(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	img := "registry.lab:5000/rl/base:1.2"
	run := e.task(e.submit(tok, `{"command":["python3","train.py"],"image":"`+img+`"}`))
	if run.Image != img {
		t.Fatalf("image: %q", run.Image)
	}
	r := e.req("GET", "/api/tasks/"+run.ID, tok, "")
	if !strings.Contains(string(r.body), `"image":"`+img+`"`) {
		t.Fatalf("the Task's JSON: %s", r.body)
	}
	rerun := func(body string) string {
		t.Helper()
		r := e.req("POST", "/api/tasks/"+run.ID+"/rerun", tok, body)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun %s: %d %s", body, r.status, r.body)
		}
		return e.task(r.json(t)["id"].(string)).Image
	}
	if got := rerun(`{}`); got != img {
		t.Fatalf("rerun keeps the image: %q", got)
	}
	if got := rerun(`{"image":"pytorch/pytorch:2.3.0"}`); got != "pytorch/pytorch:2.3.0" {
		t.Fatalf("rerun with another image: %q", got)
	}
	if got := rerun(`{"image":""}`); got != "" {
		t.Fatalf("rerun without an image: %q", got)
	}
	_, runs := e.sweep(tok, `{"name":"s","base":{"command":["x"],"image":"debian:bookworm"},"grid":{"lr":[1,2]}}`)
	for _, id := range runs {
		if m := e.task(id); m.Image != "debian:bookworm" {
			t.Fatalf("sweep member: %q", m.Image)
		}
	}
}

func TestImage_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	for _, c := range []struct{ body, field string }{
		{`{"image":"--privileged"}`, `image \"--privileged\" must be a container image reference`},
		{`{"image":"Upper/Case"}`, `must be a container image reference`},
		{`{"image":"a b"}`, `must be a container image reference`},
		{`{"image":"` + strings.Repeat("a", 300) + `"}`, `at most 255 bytes`},
		{`{"image":3}`, `image`},
		{`{"image":"debian:bookworm","python":{"venv":"/v"}}`, `image and python cannot be combined`},
	} {
		body := `{"command":["x"],` + c.body[1:]
		r := e.req("POST", "/api/train", tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), c.field) {
			t.Errorf("%s: want 400 naming %s, got %d %s", c.body, c.field, r.status, r.body)
		}
	}
}
