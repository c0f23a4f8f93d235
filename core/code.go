package core

import (
	"net/url"
	"strings"
)

// MaxCodeDiffBytes bounds a run's stored diff (API.md: `git diff HEAD`, at
// most 2 MiB); a larger one is not stored and DiffOmitted says so.
const MaxCodeDiffBytes = 2 << 20

// CodeInfo records the code version a run was submitted from: the git
// commit of the submitter's directory, whether its work tree had
// uncommitted changes, the remote it came from, and whether those changes
// themselves (`git diff HEAD`) are stored beside the run (GET
// /api/tasks/{id}/code.diff). The diff never travels inside a Task: it can
// be megabytes, and it is shown only to those who may see the run's env.
type CodeInfo struct {
	GitCommit string `json:"gitCommit"`
	GitDirty  bool   `json:"gitDirty"`
	// GitRemote is the URL of the branch's upstream remote (else origin),
	// credentials removed (RedactRemote).
	GitRemote string `json:"gitRemote"`
	HasDiff   bool   `json:"hasDiff"`
	// DiffOmitted says why a dirty tree's diff is not stored (too large,
	// git failed, not the rerunner's to copy); empty otherwise.
	DiffOmitted string `json:"diffOmitted,omitempty"`
	// DiffID names the stored diff in the store (the sha256 of its bytes, in
	// hex), so that a rerun or every member of a sweep shares one copy. It
	// never leaves the masters.
	DiffID string `json:"-"`
	// Tree is the sha256 tree hash of the run's code snapshot (codetree),
	// the files it runs ("" when submitted with --no-code: it runs in
	// workdir); Subdir the directory of the snapshot it starts in.
	Tree   string `json:"tree,omitempty"`
	Subdir string `json:"subdir,omitempty"`
}

// RedactRemote returns a git remote without anything secret in it: a URL
// (scheme://...) loses its user info (https://user:token@host/x and
// https://token@host/x become https://host/x), its query and its fragment;
// the scp-like form user@host:path, which cannot carry a password, and local
// paths stay as they are. A URL that does not parse is dropped ("") rather
// than kept with what might be a token in it.
func RedactRemote(remote string) string {
	remote = strings.TrimSpace(remote)
	if remote == "" {
		return ""
	}
	if i := strings.Index(remote, "://"); i > 0 && !strings.ContainsAny(remote[:i], "/@:") {
		u, err := url.Parse(remote)
		if err != nil || u.Host == "" && u.Scheme != "file" {
			return ""
		}
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		return u.String()
	}
	if strings.HasPrefix(remote, "/") || strings.HasPrefix(remote, ".") {
		return remote // a local path
	}
	// scp-like: [user@]host:path. A colon before the first '@' would make
	// that "user" a user:password pair.
	if at := strings.IndexByte(remote, '@'); at >= 0 && strings.ContainsRune(remote[:at], ':') {
		return remote[at+1:]
	}
	return remote
}
