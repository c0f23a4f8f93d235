package codetree

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// How a file differs between two trees (Changes): added, modified (its
// contents or its mode), deleted.
const (
	Added    = 'A'
	Modified = 'M'
	Deleted  = 'D'
)

// Change is one path that differs from tree a to tree b; Old is a's file
// (zero when added), New b's (zero when deleted).
type Change struct {
	Kind     byte
	Path     string
	Old, New File
}

// Changes lists what differs from files a to files b (each sorted by
// path, as a Manifest's are): b's added and modified paths in b's order,
// then a's deleted ones. `rlsched code-diff` and GET
// /api/tasks/{id}/code-diff/{other} are this one comparison.
func Changes(a, b []File) []Change {
	byPath := make(map[string]File, len(a))
	for _, f := range a {
		byPath[f.Path] = f
	}
	var out []Change
	seen := make(map[string]bool, len(b))
	for _, f := range b {
		seen[f.Path] = true
		old, ok := byPath[f.Path]
		switch {
		case !ok:
			out = append(out, Change{Kind: Added, Path: f.Path, New: f})
		case old.SHA256 != f.SHA256 || old.Mode != f.Mode:
			out = append(out, Change{Kind: Modified, Path: f.Path, Old: old, New: f})
		}
	}
	for _, f := range a {
		if !seen[f.Path] {
			out = append(out, Change{Kind: Deleted, Path: f.Path, Old: f})
		}
	}
	return out
}

// MaxDiffFile: larger files are only said to differ.
const MaxDiffFile = 1 << 20

// IsText: b is UTF-8 without NUL, a file a diff shows.
func IsText(b []byte) bool { return utf8.Valid(b) && !bytes.Contains(b, []byte{0}) }

// UnifiedDiff is the hunks (3 lines of context) turning a into b: a
// longest common subsequence of lines, quadratic, so bounded by the line
// counts (a larger pair is summarised).
func UnifiedDiff(a, b string) string {
	la, lb := splitLines(a), splitLines(b)
	if len(la)*len(lb) > 25_000_000 {
		return fmt.Sprintf("@@ %d lines -> %d lines (too long to diff here) @@\n", len(la), len(lb))
	}
	// lcs[i][j]: the LCS length of la[i:] and lb[j:].
	lcs := make([][]int32, len(la)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(lb)+1)
	}
	for i := len(la) - 1; i >= 0; i-- {
		for j := len(lb) - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		line string
		ai   int // line numbers before it, in a and b
		bi   int
	}
	var ops []op
	i, j := 0, 0
	for i < len(la) || j < len(lb) {
		switch {
		case i < len(la) && j < len(lb) && la[i] == lb[j]:
			ops = append(ops, op{' ', la[i], i, j})
			i, j = i+1, j+1
		case j < len(lb) && (i == len(la) || lcs[i][j+1] >= lcs[i+1][j]):
			ops = append(ops, op{'+', lb[j], i, j})
			j++
		default:
			ops = append(ops, op{'-', la[i], i, j})
			i++
		}
	}
	const ctx = 3
	var out strings.Builder
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		start := max(0, k-ctx)
		end := k
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, run)
				break
			}
			end = run
		}
		var na, nb int
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				na++
			}
			if o.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", ops[start].ai+1, na, ops[start].bi+1, nb)
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		k = end
	}
	return out.String()
}

// splitLines splits s after each newline, keeping them.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}
