package cli

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

func init() {
	register(&command{
		name:    "artifacts",
		args:    "ID [--attempt N] [--json]",
		summary: "List the files a run wrote to its output directory.",
		details: "Everything a run writes under RLSCHED_OUTPUT_DIR reaches the master while it runs and when it\n" +
			"ends. Without --attempt the newest version of each file is listed, whichever attempt wrote it.",
		examples: []string{"rlsched artifacts $id", "rlsched artifacts $id --attempt 1 --json | jq -r '.items[].path'"},
		run:      runArtifacts,
	})
	register(&command{
		name:    "download",
		args:    "ID [PATH...] [-o DIR] [--attempt N]",
		summary: "Download a run's output files (all of them, or the PATHs given) into a folder.",
		details: "Files land under DIR (default: the current directory) at their path in the run's output\n" +
			"directory; a PATH that names a folder takes every file in it. Each file's sha256 is checked;\n" +
			"an interrupted download resumes where it stopped when run again, and a file already there\n" +
			"with the same contents is not fetched again. The local paths written are printed on standard\n" +
			"output, one per line. A path from the server that would leave DIR is refused.",
		examples: []string{
			"rlsched download $id -o ./run-$id",
			"rlsched download $id checkpoint.json",
			"rlsched download $id ckpt/ --attempt 1 -o /tmp/a1",
		},
		run: runDownload,
	})
	register(&command{
		name:     "diff",
		args:     "ID",
		summary:  "Print the uncommitted changes (git diff HEAD) a run was submitted with.",
		details:  "Only the run's owner and the admins may read it: a diff can hold secrets.",
		examples: []string{"rlsched diff $id | git apply"},
		run:      runDiff,
	})
}

// artifact is one item of GET /api/tasks/{id}/artifacts.
type artifact struct {
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	SHA256     string    `json:"sha256"`
	Attempt    int       `json:"attempt"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

// attemptFlag is --attempt N; 0 means every attempt (the newest versions).
func (inv *invocation) attemptFlag() *int {
	return inv.fs.Int("attempt", 0, "only the files of attempt `N` (1 is the first; default: the newest version of each)")
}

func (inv *invocation) attemptQuery(attempt int) (url.Values, int, bool) {
	q := url.Values{}
	if !inv.fs.isSet("attempt") {
		return q, ExitOK, true
	}
	if attempt < 1 {
		return nil, inv.usageError("--attempt must be 1 or more"), false
	}
	q.Set("attempt", strconv.Itoa(attempt))
	return q, ExitOK, true
}

// listArtifacts GETs the run's artifact list.
func (c *client) listArtifacts(inv *invocation, id string, q url.Values) ([]artifact, []byte, error) {
	var ans struct {
		Items []artifact `json:"items"`
	}
	raw, err := c.getJSON(inv.ctx, taskPath(id, "/artifacts"), q, &ans)
	return ans.Items, raw, err
}

func runArtifacts(inv *invocation, args []string) int {
	fs := inv.newFlags()
	attempt := inv.attemptFlag()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	_, id, code, ok := inv.startID(args, 1, inv.runID)
	if !ok {
		return code
	}
	q, code, ok := inv.attemptQuery(*attempt)
	if !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	items, raw, err := c.listArtifacts(inv, id, q)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	if len(items) == 0 {
		if inv.fs.isSet("attempt") {
			fmt.Fprintf(inv.env.Stderr, "attempt %d of run %s left no files\n", *attempt, id)
		} else {
			fmt.Fprintln(inv.env.Stderr, noFiles(inv, c, id))
		}
		return ExitOK
	}
	now := inv.env.now()
	t := newTable("PATH", "SIZE", "ATTEMPT", "MODIFIED", "SHA256")
	var total int64
	for _, a := range items {
		total += a.Size
		sum := a.SHA256
		if len(sum) > 12 {
			sum = sum[:12]
		}
		t.rowf("%s\t%s\t%d\t%s\t%s\n", fitWidth(a.Path, 100), humanBytes(a.Size), a.Attempt, age(now, a.ModifiedAt), orDash(sum))
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.env.Stderr, "%d file%s, %s; `rlsched download %s` fetches them\n", len(items), plural(len(items)), humanBytes(total), id)
	return ExitOK
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func runDiff(inv *invocation, args []string) int {
	inv.newFlags()
	id, c, code, ok := inv.startOn(args, inv.runID)
	if !ok {
		return code
	}
	resp, err := c.do(inv.ctx, "GET", taskPath(id, "/code.diff"), nil, nil, "text/x-diff, text/plain")
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			switch ae.Status {
			case http.StatusForbidden:
				ae.Hint = "" // the message says who may read it
			case http.StatusNotFound:
				ae.Hint = fmt.Sprintf("`rlsched show %s` shows the run's code (a run has a diff when submitted from a dirty git tree)", id)
			}
		}
		return inv.fail(err)
	}
	if _, err := inv.env.Stdout.Write(resp.body); err != nil {
		return inv.fail(fmt.Errorf("cannot write the output: %w", err))
	}
	return ExitOK
}

// noFiles says why run id has no files: still to come while it may run,
// none for good once it ended (issue 32: "no files yet" on a FAILED run).
func noFiles(inv *invocation, c *client, id string) string {
	t, _, err := c.getTask(inv.ctx, id)
	switch {
	case err != nil || !t.Status.Terminal():
		return fmt.Sprintf("run %s has no files yet (what it writes under $RLSCHED_OUTPUT_DIR is uploaded while it runs and when it ends)", id)
	case t.StartedAt == nil:
		return fmt.Sprintf("run %s ended %s without starting, so it has no files", id, t.Status)
	default:
		return fmt.Sprintf("run %s ended %s and left no files: it wrote nothing under $RLSCHED_OUTPUT_DIR", id, t.Status)
	}
}
