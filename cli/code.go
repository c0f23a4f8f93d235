package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

// codeRequest is a submission's code (API.md "Run outputs"): what
// core.CodeInfo shows of it, and the diff itself.
type codeRequest struct {
	// Tree and Subdir name the run's snapshot (snapshot.go).
	Tree        string `json:"tree,omitempty"`
	Subdir      string `json:"subdir,omitempty"`
	GitCommit   string `json:"gitCommit"`
	GitDirty    bool   `json:"gitDirty"`
	GitRemote   string `json:"gitRemote,omitempty"`
	Diff        string `json:"diff,omitempty"`
	DiffOmitted string `json:"diffOmitted,omitempty"`
}

// gitTimeout bounds all the git commands of one submission together.
const gitTimeout = 10 * time.Second

// gitCode describes the git work tree holding dir: its commit, whether it
// has uncommitted changes, its remote without credentials and its diff
// against HEAD. It returns nil when dir is in no repository (or one without
// a commit) or git is not installed: a submission then has no code, and no
// error. git runs from argv, never through a shell, with the user's
// external diff drivers and text conversions off (they run programs, and
// their output is no diff).
func gitCode(ctx context.Context, dir string) *codeRequest {
	if dir == "" {
		return nil
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	git := func(args ...string) (string, error) {
		out := &limitedBuffer{limit: 64 << 10}
		err := runGit(ctx, dir, out, args...)
		return strings.TrimSpace(out.buf.String()), err
	}
	commit, err := git("rev-parse", "--verify", "-q", "HEAD")
	if err != nil || commit == "" {
		return nil
	}
	c := &codeRequest{GitCommit: commit}
	// A status that cannot be read cannot prove the tree clean.
	status, err := git("status", "--porcelain")
	c.GitDirty = err != nil || status != ""
	c.GitRemote = core.RedactRemote(gitRemoteURL(git))
	if !c.GitDirty {
		return c
	}
	var diff limitedBuffer
	diff.limit = core.MaxCodeDiffBytes
	err = runGit(ctx, dir, &diff, "diff", "HEAD", "--no-color", "--no-ext-diff", "--no-textconv")
	switch {
	case err != nil:
		c.DiffOmitted = "git diff HEAD failed: " + fitWidth(err.Error(), 150)
	case diff.n > int64(diff.limit):
		c.DiffOmitted = fmt.Sprintf("the diff is %s, over the %d MiB limit", humanBytes(diff.n), core.MaxCodeDiffBytes>>20)
	case diff.n == 0:
		c.DiffOmitted = "only untracked files changed; git diff HEAD does not show them (git add -N does)"
	default:
		c.Diff = diff.buf.String()
	}
	return c
}

// runGit runs git with args in dir, its standard output into out. A
// failure carries the first line of git's standard error.
func runGit(ctx context.Context, dir string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	// No locks taken for a read (status refreshes the index otherwise), no
	// prompt for credentials, messages in English for the note.
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	cmd.Stdout = out
	stderr := &limitedBuffer{limit: 4096}
	cmd.Stderr = stderr
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("git %s: no answer within %v", args[0], gitTimeout)
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(stderr.buf.String()), "\n")
	var ee *exec.ExitError
	if errors.As(err, &ee) && msg != "" {
		return fmt.Errorf("git %s: %s", args[0], msg)
	}
	return fmt.Errorf("git %s: %w", args[0], err)
}

// gitRemoteURL is the URL of the current branch's upstream remote, else of
// origin, else of the repository's only remote; "" when none.
func gitRemoteURL(git func(args ...string) (string, error)) string {
	var names []string
	if branch, err := git("symbolic-ref", "--short", "-q", "HEAD"); err == nil && branch != "" {
		if r, err := git("config", "--get", "branch."+branch+".remote"); err == nil && r != "" && r != "." {
			names = append(names, r)
		}
	}
	names = append(names, "origin")
	if all, err := git("remote"); err == nil {
		if rs := strings.Fields(all); len(rs) == 1 {
			names = append(names, rs[0])
		}
	}
	for _, n := range names {
		if u, err := git("remote", "get-url", n); err == nil && u != "" {
			return u
		}
	}
	return ""
}

// limitedBuffer keeps the first limit bytes written to it and counts all
// of them: the diff's size is known even when it is too large to keep.
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
	n     int64
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.n += int64(len(p))
	if room := b.limit + 1 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// fitDiff leaves out a diff that would not fit a request even compressed
// (the 1 MiB on the wire of API.md), saying so in diffOmitted, so that a
// large diff never costs the submission.
func fitDiff(req *submitRequest) {
	if req.Code == nil || req.Code.Diff == "" {
		return
	}
	body, _, err := encodeBody(req)
	if err == nil && len(body) <= maxWireBody {
		return
	}
	req.Code.DiffOmitted = fmt.Sprintf("the diff (%s) does not fit a request even compressed",
		humanBytes(int64(len(req.Code.Diff))))
	req.Code.Diff = ""
}

// humanBytes is n as "532 B", "1.5 KiB", "3.1 MiB", "2.0 GiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
