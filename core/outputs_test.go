package core

import (
	"strings"
	"testing"
)

func TestCheckArtifactPath(t *testing.T) {
	ok := []string{"checkpoint.json", "tb/events.out.tfevents.1.host", "a b/ü.txt", ".hidden", "a..b", strings.Repeat("x", MaxArtifactPath)}
	for _, p := range ok {
		if err := CheckArtifactPath(p); err != nil {
			t.Errorf("CheckArtifactPath(%.40q): %v", p, err)
		}
	}
	bad := []string{"", "../../x", "a/../b", "..", ".", "./a", "a/.", "/etc/passwd", "a//b", "a/", "a\x00b", "a\nb", "\x7f",
		strings.Repeat("x", 5000), strings.Repeat("x", MaxArtifactPath+1), "\xff\xfe",
		"a\u0085b", "\u009bx", "model\u202egnp.exe", "a\u2066b\u2069", "x\u200fy", "\u061cz", "line\u2028two"}
	for _, p := range bad {
		if err := CheckArtifactPath(p); err == nil {
			t.Errorf("CheckArtifactPath(%.40q) accepted it", p)
		}
	}
}

func TestResumes(t *testing.T) {
	for _, c := range []struct {
		t    Task
		want bool
	}{{Task{Attempt: 1}, false}, {Task{Attempt: 2}, true}, {Task{Attempt: 1, ResumeFrom: "r1"}, true}} {
		if got := c.t.Resumes(); got != c.want {
			t.Errorf("%+v.Resumes() = %v", c.t, got)
		}
	}
}
