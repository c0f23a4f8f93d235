package core

import "testing"

func TestRedactRemote(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := RedactRemote(in); got != want {
			t.Errorf("RedactRemote(%q) = %q, want %q", in, got, want)
		}
	}
	f("", "")
	f("  https://github.com/org/repo.git\n", "https://github.com/org/repo.git")
	f("https://user:ghp_secret@github.com/org/repo.git", "https://github.com/org/repo.git")
	f("https://ghp_secret@github.com/org/repo.git", "https://github.com/org/repo.git")
	f("https://oauth2:tok@gitlab.example.com:8443/g/r.git?private_token=x#frag", "https://gitlab.example.com:8443/g/r.git")
	f("ssh://git:pw@host:2222/srv/repo.git", "ssh://host:2222/srv/repo.git")
	f("ssh://git@host/srv/repo.git", "ssh://host/srv/repo.git")
	f("git@github.com:org/repo.git", "git@github.com:org/repo.git")
	f("git@github.com:org/repo@v2.git", "git@github.com:org/repo@v2.git")
	f("user:password@host:org/repo.git", "host:org/repo.git")
	f("host:org/repo.git", "host:org/repo.git")
	f("/srv/git/repo.git", "/srv/git/repo.git")
	f("../other", "../other")
	f("file:///srv/git/repo.git", "file:///srv/git/repo.git")
	f("https://user:pa%zzss@host/x", "") // does not parse: dropped, not kept with the token
	f("https:///nohost", "")
}
