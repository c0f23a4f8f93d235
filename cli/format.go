package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes the server's JSON indented (as is when it is not JSON).
func (inv *invocation) printJSON(raw []byte) int {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(raw))
	}
	buf.WriteByte('\n')
	if _, err := inv.env.Stdout.Write(buf.Bytes()); err != nil {
		return inv.fail(fmt.Errorf("cannot write the output: %w", err))
	}
	return ExitOK
}

// table is the column layout of every listing. Rows are kept in memory and
// reach stdout in one write, after the last row: a command that fails halfway
// through its rows prints no part of the table.
type table struct {
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

// newTable starts a table with its header row.
func newTable(columns ...string) *table {
	t := &table{}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 8, 2, ' ', 0)
	t.row(columns...)
	return t
}

// row adds a row of cells.
func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

// rowf adds a row formatted like fmt.Printf: cells separated by \t, ended by \n.
func (t *table) rowf(format string, a ...any) { fmt.Fprintf(t.tw, format, a...) }

// bytes is the table laid out.
func (t *table) bytes() []byte {
	t.tw.Flush()
	return t.buf.Bytes()
}

// printTable writes t to stdout.
func (inv *invocation) printTable(t *table) error {
	_, err := inv.env.Stdout.Write(t.bytes())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age is a short duration like 42s, 3m, 5h, 2d.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// clock formats an elapsed duration as m:ss or h:mm:ss.
func clock(d time.Duration) string {
	s := int(d / time.Second)
	if s < 0 {
		s = 0
	}
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

func formatFloat(f *float64, short bool) string {
	if f == nil {
		return "-"
	}
	if short {
		return strconv.FormatFloat(*f, 'g', 5, 64)
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

func formatInt(i *int) string {
	if i == nil {
		return "-"
	}
	return strconv.Itoa(*i)
}

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// fitWidth is s in at most n runes of one terminal line: tabs and newlines,
// which would break a table, become spaces; a cut ends in "…". Messages
// and logs bound bytes instead (internal/clip).
func fitWidth(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// shellJoin quotes argv the way a POSIX shell would need it.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isTerminal reports whether w is a terminal that understands \r and
// erase-line, so a progress line may be redrawn in place.
func (e Env) isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	if t := e.Getenv("TERM"); t == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
