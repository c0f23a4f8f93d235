package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/rlsched/rlsched/codetree"
)

func init() {
	register(&command{
		name:    "code",
		args:    "ID [-o DIR] [--json]",
		summary: "List the files of the code snapshot a run runs, or download them into a folder.",
		details: "A run submitted from a tree runs a snapshot of it, taken at submit (rlsched submit --help).\n" +
			"Without -o the snapshot's files are listed (mode, size, path); with -o DIR they are written\n" +
			"under DIR, which must be new or empty, modes and symlinks kept, each file's sha256 checked.\n" +
			"Readable by whoever may read the run's output files.",
		examples: []string{"rlsched code $id", "rlsched code $id -o /tmp/code-$id"},
		run:      runCode,
	})
	register(&command{
		name:     "code-diff",
		args:     "A B",
		summary:  "Compare the code snapshots of two runs: files added, deleted and changed, and a unified diff of changed text.",
		examples: []string{"rlsched code-diff $a $b"},
		run:      runCodeDiff,
	})
}

// codeListing is GET /api/tasks/{id}/code.
type codeListing struct {
	Tree   string          `json:"tree"`
	Subdir string          `json:"subdir"`
	Size   int64           `json:"size"`
	Files  []codetree.File `json:"files"`
}

func (c *client) codeOf(inv *invocation, id string) (codeListing, []byte, error) {
	var l codeListing
	raw, err := c.getJSON(inv.ctx, taskPath(id, "/code"), nil, &l)
	return l, raw, err
}

// codeFilePath is /api/tasks/{id}/code/{path}, each part escaped.
func codeFilePath(id, path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return taskPath(id, "/code/"+strings.Join(parts, "/"))
}

// maxCodeFile bounds a file read into memory (a code snapshot's file is at
// most CODE_MAX_MB anyway).
const maxCodeFile = 1 << 30

// codeFile reads one file of run id's snapshot and checks its sha256.
func (c *client) codeFile(inv *invocation, id string, f codetree.File) ([]byte, error) {
	resp, err := c.stream(inv.ctx, codeFilePath(id, f.Path), nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, min(f.Size, maxCodeFile)+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", f.Path, err)
	}
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != f.SHA256 {
		return nil, fmt.Errorf("%s arrived with another sha256 than the snapshot's; try again", f.Path)
	}
	return b, nil
}

func runCode(inv *invocation, args []string) int {
	fs := inv.newFlags()
	var outDir string
	fs.StringVar(&outDir, "o", "", "write the files under `DIR` (new or empty)")
	fs.alias("output", "o")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	_, id, code, ok := inv.startID(args, 1, inv.runID)
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
	l, raw, err := c.codeOf(inv, id)
	if err != nil {
		return inv.fail(err)
	}
	if outDir == "" {
		if *jsonOut {
			return inv.printJSON(raw)
		}
		w := tabwriter.NewWriter(newSafeWriter(inv.env.Stdout), 0, 4, 2, ' ', 0)
		for _, f := range l.Files {
			name := f.Path
			if f.Mode == codetree.ModeSymlink {
				name += " -> " + f.Target
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", f.Mode, humanBytes(f.Size), name)
		}
		w.Flush()
		fmt.Fprintf(inv.env.Stderr, "tree %s: %d files, %s; runs in %s\n", l.Tree, len(l.Files), humanBytes(l.Size), orDash(l.Subdir))
		return ExitOK
	}
	if err := c.writeCode(inv, id, l, outDir); err != nil {
		return inv.fail(err)
	}
	return ExitOK
}

// writeCode writes the snapshot l of run id under dir.
func (c *client) writeCode(inv *invocation, id string, l codeListing, dir string) error {
	// The server's manifest passes the rules a worker's does, or nothing
	// is written: no path leaves dir, no file lands below a symlink.
	m := codetree.Manifest{Files: l.Files}
	if err := m.Check(codetree.Limits{}); err != nil {
		return fmt.Errorf("refusing the snapshot of run %s: %w", id, err)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%s is not empty: give a new or empty directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range m.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if f.Mode == codetree.ModeSymlink {
			if err := os.Symlink(f.Target, p); err != nil {
				return err
			}
			continue
		}
		b, err := c.codeFile(inv, id, f)
		if err != nil {
			return err
		}
		perm := fs.FileMode(0o644)
		if f.Mode == codetree.ModeExec {
			perm = 0o755
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		if _, err := out.Write(b); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		fmt.Fprintln(inv.env.Stdout, safeText(p))
	}
	return nil
}

func runCodeDiff(inv *invocation, args []string) int {
	inv.newFlags()
	p, code, ok := inv.start(args, 2, 2)
	if !ok {
		return code
	}
	a, b := p.pos[0], p.pos[1]
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	la, _, err := c.codeOf(inv, a)
	if err != nil {
		return inv.fail(err)
	}
	lb, _, err := c.codeOf(inv, b)
	if err != nil {
		return inv.fail(err)
	}
	out := newSafeWriter(inv.env.Stdout)
	if la.Tree == lb.Tree {
		fmt.Fprintf(inv.env.Stderr, "runs %s and %s run the same tree %s\n", a, b, la.Tree)
		return ExitOK
	}
	var changed [][2]codetree.File
	for _, ch := range codetree.Changes(la.Files, lb.Files) {
		fmt.Fprintf(out, "%c %s\n", ch.Kind, ch.Path)
		if ch.Kind == codetree.Modified {
			changed = append(changed, [2]codetree.File{ch.Old, ch.New})
		}
	}
	for _, pair := range changed {
		fa, fb := pair[0], pair[1]
		if fa.SHA256 == fb.SHA256 {
			fmt.Fprintf(out, "\nmode of %s: %s -> %s\n", fa.Path, fa.Mode, fb.Mode)
			continue
		}
		ta, tb, text := "", "", fa.Size <= codetree.MaxDiffFile && fb.Size <= codetree.MaxDiffFile
		if text {
			xa, err := c.codeFile(inv, a, fa)
			if err != nil {
				return inv.fail(err)
			}
			xb, err := c.codeFile(inv, b, fb)
			if err != nil {
				return inv.fail(err)
			}
			ta, tb = string(xa), string(xb)
			text = codetree.IsText(xa) && codetree.IsText(xb)
		}
		if !text {
			fmt.Fprintf(out, "\nbinary or large files %s differ\n", fa.Path)
			continue
		}
		fmt.Fprintf(out, "\n--- %s/%s\n+++ %s/%s\n", a, fa.Path, b, fb.Path)
		out.Write([]byte(codetree.UnifiedDiff(ta, tb)))
	}
	return ExitOK
}
