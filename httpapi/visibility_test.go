package httpapi

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/artifact/disk"
	"github.com/rlsched/rlsched/core"
)

// TestOutputsVisibility (issue 25): a private run's outputs, and resuming
// from them, are its owner's and admins'; ARTIFACT_VISIBILITY=owner makes
// every run so; the default shares a lab's results.
func TestOutputsVisibility(t *testing.T) {
	for _, vis := range []string{"", core.OutputsOwner} {
		t.Run("visibility="+vis, func(t *testing.T) {
			blobs, err := disk.Open(filepath.Join(t.TempDir(), "artifacts"))
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvWith(t, func(c *Config) { c.Blobs, c.OutputsVisibility = blobs, vis })
			adminTok, _ := e.user("root") // the first user: ADMIN
			tok, _ := e.user("alice")
			bobTok, _ := e.user("bob")
			shared := e.submit(tok, `{"command":["x"]}`)
			private := e.submit(tok, `{"command":["x"],"private":true}`)
			if !e.task(private).Private || e.task(shared).Private {
				t.Fatalf("private: got %v and %v, want true and false", e.task(private).Private, e.task(shared).Private)
			}
			mod := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
			for _, id := range []string{shared, private} {
				putArtifact(t, e, blobs, id, 1, "ckpt.json", []byte(`{}`), mod)
			}
			check := func(who, token, id string, want bool) {
				t.Helper()
				for _, p := range []string{"/api/tasks/" + id + "/artifacts", "/api/tasks/" + id + "/artifacts/ckpt.json"} {
					r := e.req("GET", p, token, nil)
					if want && r.status != http.StatusOK || !want && (r.status != http.StatusForbidden || r.errCode(t) != codeForbidden) {
						t.Errorf("%s GET %s: %d %s, want readable %v", who, p, r.status, r.body, want)
					}
				}
				for _, body := range []string{`{"command":["y"],"resumeFrom":"` + id + `"}`,
					`{"base":{"command":["y"],"resumeFrom":"` + id + `"},"grid":{"a":[1]}}`} {
					path := "/api/train"
					if strings.Contains(body, "grid") {
						path = "/api/sweeps"
					}
					r := e.req("POST", path, token, body)
					if want && r.status != http.StatusAccepted || !want && r.status != http.StatusForbidden {
						t.Errorf("%s POST %s resuming from %s: %d %s, want allowed %v", who, path, id, r.status, r.body, want)
					}
				}
			}
			check("the owner", tok, private, true)
			check("an admin", adminTok, private, true)
			check("another user", bobTok, private, false)
			check("another user", bobTok, shared, vis != core.OutputsOwner)
			// A rerun of a private run stays private.
			r := e.req("POST", "/api/tasks/"+private+"/rerun", tok, nil)
			var sub struct{ ID string }
			if r.status != http.StatusAccepted || json.Unmarshal(r.body, &sub) != nil || !e.task(sub.ID).Private {
				t.Errorf("rerun of a private run: %d %s, private %v", r.status, r.body, sub.ID != "" && e.task(sub.ID).Private)
			}
		})
	}
}

// TestSweepSpecStoredNormalised (issue 25): a sweep's spec is the decoded
// one, never the body as sent: no code diff (kept once, named by every
// member), the remote's credentials redacted, env masked for others
// whatever the case of its key.
func TestSweepSpecStoredNormalised(t *testing.T) {
	e := newEnv(t)
	e.user("root")
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	body := `{"name":"s","base":{"command":["x"],"ENV":{"WANDB_API_KEY":"sekrit"},` +
		`"code":{"gitCommit":"abc","gitDirty":true,"gitRemote":"https://alice:ghp_tok@example.com/r.git","diff":"+password = hunter2\n"}},` +
		`"grid":{"lr":[0.1,0.2]}}`
	r := e.req("POST", "/api/sweeps", tok, body)
	if r.status != http.StatusAccepted {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct {
		ID   string
		Runs []string
	}
	if err := json.Unmarshal(r.body, &created); err != nil {
		t.Fatal(err)
	}
	for who, token := range map[string]string{"owner": tok, "other": bobTok} {
		r := e.req("GET", "/api/sweeps/"+created.ID, token, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s GET: %d %s", who, r.status, r.body)
		}
		var got struct{ Spec json.RawMessage }
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		s := string(got.Spec)
		for _, leak := range []string{"hunter2", "ghp_tok", `"ENV"`, `"diff"`} {
			if strings.Contains(s, leak) {
				t.Errorf("%s sees the spec with %s: %s", who, leak, s)
			}
		}
		if who == "other" && strings.Contains(s, "sekrit") {
			t.Errorf("another user sees the env value: %s", s)
		}
		if who == "owner" && !strings.Contains(s, `"env":{"WANDB_API_KEY":"sekrit"}`) {
			t.Errorf("the owner's spec lost its env: %s", s)
		}
		if !strings.Contains(s, `"gitCommit":"abc"`) || !strings.Contains(s, `"grid":{"lr":[0.1,0.2]}`) {
			t.Errorf("%s's spec lost what it was: %s", who, s)
		}
	}
	for _, id := range created.Runs {
		m := e.task(id)
		if !m.Code.HasDiff || m.Code.DiffID == "" || strings.Contains(m.Code.GitRemote, "ghp_tok") {
			t.Errorf("member %s: code %+v, want its sweep's diff named and the remote redacted", id, m.Code)
		}
		if r := e.req("GET", "/api/tasks/"+id+"/code.diff", tok, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "hunter2") {
			t.Errorf("owner reads member %s's diff: %d %s", id, r.status, r.body)
		}
		if r := e.req("GET", "/api/tasks/"+id+"/code.diff", bobTok, nil); r.status != http.StatusForbidden {
			t.Errorf("another user reads member %s's diff: %d", id, r.status)
		}
	}
}
