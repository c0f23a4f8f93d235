package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

const (
	// partSuffix marks a file still being downloaded; a later download
	// resumes it with a Range request.
	partSuffix = ".rlsched-part"
	// progressAbove: files larger than this get a progress bar on a terminal.
	progressAbove = 4 << 20
	// downloadIdle: no byte of a file's body for this long ends its download.
	downloadIdle = 60 * time.Second
	// maxArtifactPath is API.md's bound on an artifact's path.
	maxArtifactPath = 1024
)

// errDigest is a file whose bytes do not hash to the sha256 the server
// gave: the partial file is removed and the download starts over once.
var errDigest = errors.New("checksum mismatch")

func runDownload(inv *invocation, args []string) int {
	fs := inv.newFlags()
	attempt := inv.attemptFlag()
	var outDir string
	fs.StringVar(&outDir, "o", "", "write the files under `DIR` (default: the current directory)")
	fs.alias("output", "o")
	p, id, code, ok := inv.startID(args, -1, inv.runID)
	if !ok {
		return code
	}
	q, code, ok := inv.attemptQuery(*attempt)
	if !ok {
		return code
	}
	if fs.isSet("o") && outDir == "" {
		return inv.usageError("-o is empty")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	items, _, err := c.listArtifacts(inv, id, q)
	if err != nil {
		return inv.fail(err)
	}
	sel, missing := selectArtifacts(items, p.pos[1:])
	if len(missing) > 0 {
		return inv.fail(fmt.Errorf("run %s has no file %s; `rlsched artifacts %s` lists them", id, strings.Join(quoteAll(missing), ", "), id))
	}
	if len(sel) == 0 {
		fmt.Fprintln(inv.env.Stderr, noFiles(inv, c, id))
		return ExitOK
	}
	dir := outDir
	if dir == "" {
		dir = inv.env.Dir
	} else if !filepath.IsAbs(dir) && inv.env.Dir != "" {
		dir = filepath.Join(inv.env.Dir, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return inv.fail(fmt.Errorf("cannot create %s: %w", dir, err))
	}
	// Every file operation goes through root: a path, or a symlink already
	// in dir, that would lead out of it fails instead.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return inv.fail(fmt.Errorf("cannot open %s: %w", dir, err))
	}
	defer root.Close()
	d := &downloader{inv: inv, c: c, root: root, id: id, q: q,
		progress: inv.env.ttyErr || inv.env.isTerminal(inv.rawStderr)}
	var fetched, same, failed int
	var bytes int64
	for _, a := range sel {
		if why := badArtifactPath(a.Path); why != "" {
			inv.errorf("refusing file %q of the server: %s", fitWidth(a.Path, 200), why)
			failed++
			continue
		}
		unchanged, err := d.fetch(a)
		if err != nil {
			if interrupted(err) {
				return inv.fail(err)
			}
			var ae *apiError
			if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				ae.Hint = fmt.Sprintf("the file may have gone since it was listed: `rlsched artifacts %s`", id)
			}
			inv.errorf("cannot download %s: %s", a.Path, errText(err))
			failed++
			continue
		}
		if unchanged {
			same++
		} else {
			fetched++
			bytes += a.Size
		}
		fmt.Fprintln(inv.env.Stdout, filepath.Join(dir, filepath.FromSlash(a.Path)))
	}
	summary := fmt.Sprintf("%d file%s into %s: %d downloaded (%s)", len(sel), plural(len(sel)), dir, fetched, humanBytes(bytes))
	if same > 0 {
		summary += fmt.Sprintf(", %d already there", same)
	}
	if failed > 0 {
		fmt.Fprintf(inv.env.Stderr, "%s, %d failed; run the command again to resume\n", summary, failed)
		return ExitError
	}
	fmt.Fprintln(inv.env.Stderr, summary)
	return ExitOK
}

// errText is err for a one-line message, the API's hint appended.
func errText(err error) string {
	var ae *apiError
	if errors.As(err, &ae) && ae.Hint != "" {
		return ae.Error() + "; " + ae.Hint
	}
	return err.Error()
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// selectArtifacts picks the items named by want (all of them when want is
// empty): a path names its file, or every file under it when it is a
// folder. missing lists the names that match nothing.
func selectArtifacts(items []artifact, want []string) (sel []artifact, missing []string) {
	if len(want) == 0 {
		return items, nil
	}
	taken := make([]bool, len(items))
	for _, w := range want {
		prefix := strings.TrimSuffix(w, "/") + "/"
		found := false
		for i, a := range items {
			if a.Path == w || strings.HasPrefix(a.Path, prefix) {
				found = true
				if !taken[i] {
					taken[i] = true
					sel = append(sel, a)
				}
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return sel, missing
}

// badArtifactPath says why path may not be written under the download
// folder ("" when it may): it must be relative, of plain names (no "..",
// ".", empty parts or NUL), at most 1024 bytes, valid UTF-8 and local to the
// folder on this system.
func badArtifactPath(path string) string {
	switch {
	case path == "":
		return "empty path"
	case len(path) > maxArtifactPath:
		return fmt.Sprintf("longer than %d bytes", maxArtifactPath)
	case strings.HasPrefix(path, "/"):
		return "an absolute path"
	case strings.IndexByte(path, 0) >= 0:
		return "a NUL in the path"
	case !utf8.ValidString(path):
		return "not UTF-8"
	}
	for _, part := range strings.Split(path, "/") {
		if part == "" || part == "." || part == ".." {
			return "a path with an empty, . or .. part"
		}
	}
	if !filepath.IsLocal(filepath.FromSlash(path)) {
		return "not a path inside the download folder on this system"
	}
	if strings.HasSuffix(path, partSuffix) {
		return "named like a partial download (" + partSuffix + ")"
	}
	return ""
}

// downloader fetches the files of one run into root.
type downloader struct {
	inv      *invocation
	c        *client
	root     *os.Root
	id       string
	q        url.Values // ?attempt=
	progress bool       // draw a progress bar on stderr
}

// artifactPath is /api/tasks/{id}/artifacts/{path}, each part escaped.
func artifactPath(id, path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return taskPath(id, "/artifacts/"+strings.Join(parts, "/"))
}

// fetch downloads a into its place under the root, resuming a partial
// download left by an earlier attempt. unchanged: the file was already
// there with a's size and sha256, and nothing was fetched.
func (d *downloader) fetch(a artifact) (unchanged bool, err error) {
	rel := filepath.FromSlash(a.Path)
	if parent := filepath.Dir(rel); parent != "." {
		if err := d.root.MkdirAll(parent, 0o755); err != nil {
			return false, fmt.Errorf("cannot create its folder: %w", err)
		}
	}
	if st, err := d.root.Lstat(rel); err == nil && st.Mode().IsRegular() && st.Size() == a.Size && a.SHA256 != "" {
		if sum, err := d.hashFile(rel); err == nil && sum == a.SHA256 {
			return true, nil
		}
	}
	err = d.transfer(a, rel, true)
	if errors.Is(err, errDigest) {
		// The partial file did not belong to these bytes (the file changed
		// on the server between the two downloads): start over.
		err = d.transfer(a, rel, false)
	}
	return false, err
}

func (d *downloader) hashFile(rel string) (string, error) {
	f, err := d.root.Open(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// transfer downloads a into rel+partSuffix (continuing what is there when
// resume is set), checks its sha256 and renames it to rel.
func (d *downloader) transfer(a artifact, rel string, resume bool) error {
	part := rel + partSuffix
	f, err := d.root.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", part, err)
	}
	defer f.Close()
	h := sha256.New()
	var have int64
	if resume {
		// Hash what an earlier download left, to continue the sum.
		if have, err = io.Copy(h, f); err != nil {
			have = 0
		}
	}
	if have == 0 || have > a.Size {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("cannot write %s: %w", part, err)
		}
		h.Reset()
		have = 0
	}
	if have == a.Size && a.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) == a.SHA256 {
		// Complete already: an earlier download stopped before its rename.
		return d.finish(f, part, rel)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return fmt.Errorf("cannot write %s: %w", part, err)
	}

	ctx, cancel := context.WithCancel(d.inv.ctx)
	defer cancel()
	// Identity: a transparently decompressed body would not match the
	// byte offsets of a Range.
	hdr := http.Header{"Accept": {"*/*"}, "Accept-Encoding": {"identity"}}
	if have > 0 {
		hdr.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		if a.SHA256 != "" {
			hdr.Set("If-Range", `"`+a.SHA256+`"`) // changed since: the whole file comes instead
		}
	}
	resp, err := d.c.stream(ctx, artifactPath(d.id, a.Path), d.q, hdr)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusRequestedRangeNotSatisfiable && have > 0 {
		return errDigest // the partial file is not a prefix of this file
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	total := a.Size
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, size, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			return errDigest
		}
		total = size
	default: // 200: the whole file, from its first byte
		if have > 0 {
			if err := f.Truncate(0); err != nil {
				return fmt.Errorf("cannot write %s: %w", part, err)
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("cannot write %s: %w", part, err)
			}
			h.Reset()
			have = 0
		}
		if resp.ContentLength >= 0 {
			total = resp.ContentLength
		}
	}
	// The server's ETag names the bytes it sends (the file may have a newer
	// version than the list showed); the list's sha256 otherwise.
	want := a.SHA256
	if tag := etagSHA(resp.Header.Get("ETag")); tag != "" {
		want = tag
	}

	var idle atomic.Bool
	timer := time.AfterFunc(downloadIdle, func() { idle.Store(true); cancel() })
	defer timer.Stop()
	body := &idleReader{r: resp.Body, timer: timer}
	var bar *progressBar
	if d.progress && total > progressAbove {
		bar = newProgressBar(d.inv, a.Path, have, total)
		defer bar.done()
	}
	var w io.Writer = io.MultiWriter(f, h)
	if bar != nil {
		w = io.MultiWriter(f, h, bar)
	}
	n, err := io.Copy(w, body)
	have += n
	if err != nil {
		switch {
		case idle.Load():
			return fmt.Errorf("no data from the server for %v (%s of %s kept; run the command again to resume)", downloadIdle, humanBytes(have), humanBytes(total))
		case d.inv.ctx.Err() != nil:
			return &netError{Server: d.c.base, Err: d.inv.ctx.Err(), Interrupted: true}
		}
		return fmt.Errorf("transfer broke off after %s of %s (kept; run the command again to resume): %w", humanBytes(have), humanBytes(total), unwrapURLError(err))
	}
	if have != total {
		return fmt.Errorf("the server sent %s of %s (kept; run the command again to resume)", humanBytes(have), humanBytes(total))
	}
	if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
		f.Close()
		_ = d.root.Remove(part)
		return fmt.Errorf("%w: the bytes hash to %.12s…, the server named %.12s…", errDigest, got, want)
	}
	return d.finish(f, part, rel)
}

// finish makes the checked partial file f durable and puts it in place.
func (d *downloader) finish(f *os.File, part, rel string) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cannot write %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot write %s: %w", part, err)
	}
	if err := d.root.Rename(part, rel); err != nil {
		return fmt.Errorf("cannot move %s into place: %w", part, err)
	}
	return nil
}

// parseContentRange reads "bytes START-END/SIZE".
func parseContentRange(v string) (start, size int64, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, sz, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	s, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(s, 10, 64)
	size, err2 := strconv.ParseInt(sz, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || size < start {
		return 0, 0, false
	}
	return start, size, true
}

// etagSHA is the sha256 an ETag carries ("..." or W/"..." around 64 hex
// digits), else "".
func etagSHA(v string) string {
	v = strings.Trim(strings.TrimPrefix(strings.TrimSpace(v), "W/"), `"`)
	if len(v) != 64 {
		return ""
	}
	if _, err := hex.DecodeString(v); err != nil {
		return ""
	}
	return strings.ToLower(v)
}

// idleReader pushes its timer back at every read: the timer ends a
// transfer that stalls, however long a moving one takes.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.timer.Reset(downloadIdle)
	return n, err
}

// progressBar redraws one line on the raw stderr (a terminal): name,
// percent, bytes and rate, at most ten times a second.
type progressBar struct {
	inv        *invocation
	name       string
	have, size int64
	start      time.Time
	startHave  int64
	last       time.Time
}

func newProgressBar(inv *invocation, name string, have, size int64) *progressBar {
	now := inv.env.now()
	b := &progressBar{inv: inv, name: safeText(fitWidth(name, 40)), have: have, size: size, start: now, startHave: have}
	b.draw(now)
	return b
}

func (b *progressBar) Write(p []byte) (int, error) {
	b.have += int64(len(p))
	if now := b.inv.env.now(); now.Sub(b.last) >= 100*time.Millisecond {
		b.draw(now)
	}
	return len(p), nil
}

func (b *progressBar) draw(now time.Time) {
	b.last = now
	pct := 100 * float64(b.have) / float64(max(b.size, 1))
	const width = 24
	fill := int(pct / 100 * width)
	rate := ""
	if el := now.Sub(b.start).Seconds(); el > 0.2 {
		rate = "  " + humanBytes(int64(float64(b.have-b.startHave)/el)) + "/s"
	}
	fmt.Fprintf(b.inv.rawStderr, "\r\x1b[K%s [%s%s] %3.0f%% %s / %s%s", b.name,
		strings.Repeat("#", fill), strings.Repeat(".", width-fill), pct, humanBytes(b.have), humanBytes(b.size), rate)
}

func (b *progressBar) done() {
	b.draw(b.inv.env.now())
	fmt.Fprint(b.inv.rawStderr, "\n")
}

// safeText is s with terminal controls shown, not obeyed (safeWriter's rule),
// for text written to the raw stderr.
func safeText(s string) string {
	var out []byte
	for _, r := range s {
		out = appendSafeRune(out, r)
	}
	return string(out)
}
