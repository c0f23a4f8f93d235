package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// pipelineCommands are the subcommands of `rlsched pipeline`.
var pipelineCommands = map[string]*command{}

func init() {
	register(&command{
		name:    "pipeline",
		args:    "(run FILE | show ID | retry ID) [--json]",
		summary: "Submit a pipeline of runs that wait for one another (POST /api/pipelines); show it as a tree; retry it.",
		details: `A pipeline file is JSON: {"name": "...", "steps": [...]}, each step a submission as
POST /api/train takes it (command, params, gpus, ...) with a unique "name", and "after":
[{"step": "train", "when": "succeeded"}] naming the steps it waits for (or {"run": ID},
{"sweep": ID}); "inputsFrom": ["train"] gives it those steps' output files in
RLSCHED_INPUT_DIR/<run id>/. The whole file is stored at once or not at all.

  rlsched pipeline run FILE     submit it; print the pipeline's id
  rlsched pipeline show ID      its steps as a tree, each with its status and run
  rlsched pipeline retry ID     rerun the steps that ended without succeeding and those after them`,
		examples: []string{"rlsched pipeline run exp.json", "rlsched pipeline show $id", "rlsched pipeline retry $id"},
		run:      runPipeline,
	})
	for _, c := range []*command{
		{name: "pipeline run", args: "FILE [--json]", summary: "Submit the pipeline in FILE; print its id.", run: runPipelineRun},
		{name: "pipeline show", args: "ID [--json]", summary: "Show a pipeline's steps as a tree, each with its status and run.", run: runPipelineShow},
		{name: "pipeline retry", args: "ID [--json]", summary: "Rerun the steps that ended without succeeding, and the steps after them; print the new runs.", run: runPipelineRetry},
	} {
		pipelineCommands[strings.TrimPrefix(c.name, "pipeline ")] = c
	}
}

func runPipeline(inv *invocation, args []string) int {
	if len(args) > 0 {
		if sub := pipelineCommands[args[0]]; sub != nil {
			inv.cmd = sub
			return sub.run(inv, args[1:])
		}
	}
	inv.newFlags()
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	return inv.usageError("give a pipeline command: run FILE, show ID or retry ID")
}

func pipelinePath(id, suffix string) string { return "/api/pipelines/" + url.PathEscape(id) + suffix }

type pipelineRuns struct {
	ID   string            `json:"id"`
	Runs map[string]string `json:"runs"`
}

func runPipelineRun(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, `print the server's answer ({"id", "runs"})`)
	p, code, ok := inv.start(args, 1, 1)
	if !ok {
		return code
	}
	path := p.pos[0]
	if !filepath.IsAbs(path) {
		path = filepath.Join(inv.env.Dir, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return inv.fail(fmt.Errorf("cannot read the pipeline file: %w", err))
	}
	if !json.Valid(b) {
		return inv.usageError("%s is not JSON: a pipeline file is {\"name\": ..., \"steps\": [...]}", p.pos[0])
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var ans pipelineRuns
	raw, err := c.postJSON(inv.ctx, "/api/pipelines", json.RawMessage(bytes.TrimSpace(b)), &ans)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	fmt.Fprintln(inv.env.Stdout, ans.ID)
	fmt.Fprintf(inv.env.Stderr, "pipeline %s: %d steps queued\n", ans.ID, len(ans.Runs))
	return ExitOK
}

func (inv *invocation) pipelineID(p parsed) (string, int, bool) {
	id := p.pos[0]
	if !core.ValidTaskID(id) {
		return "", inv.usageError("invalid pipeline id %q: ids are 1–64 of A-Z a-z 0-9 _ -", id), false
	}
	return id, ExitOK, true
}

// pipelineView is GET /api/pipelines/{id}'s answer.
type pipelineView struct {
	ID     string              `json:"id"`
	Name   string              `json:"name"`
	User   string              `json:"user"`
	Counts map[core.Status]int `json:"counts"`
	Steps  []struct {
		Name          string      `json:"name"`
		Run           string      `json:"run"`
		Status        core.Status `json:"status"`
		After         []string    `json:"after"`
		Depth         int         `json:"depth"`
		Reason        string      `json:"reason"`
		PendingReason string      `json:"pendingReason"`
	} `json:"steps"`
}

func runPipelineShow(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	id, c, code, ok := inv.startOn(args, inv.pipelineID)
	if !ok {
		return code
	}
	var v pipelineView
	raw, err := c.getJSON(inv.ctx, pipelinePath(id, ""), nil, &v)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	fmt.Fprint(inv.env.Stdout, drawPipeline(v))
	return ExitOK
}

// drawPipeline draws the steps as a tree: each step under its deepest
// parent (the first of them), its other parents named after it.
func drawPipeline(v pipelineView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %s %q of %s:", v.ID, v.Name, v.User)
	for _, s := range core.Statuses() {
		if n := v.Counts[s]; n > 0 {
			fmt.Fprintf(&b, " %d %s", n, s)
		}
	}
	b.WriteString("\n")
	index := map[string]int{}
	for i, s := range v.Steps {
		index[s.Name] = i
	}
	kids := make([][]int, len(v.Steps))
	var roots []int
	primary := make([]int, len(v.Steps))
	for i, s := range v.Steps {
		primary[i] = -1
		for _, p := range s.After {
			if j, ok := index[p]; ok && (primary[i] < 0 || v.Steps[j].Depth > v.Steps[primary[i]].Depth) {
				primary[i] = j
			}
		}
		if primary[i] < 0 {
			roots = append(roots, i)
		} else {
			kids[primary[i]] = append(kids[primary[i]], i)
		}
	}
	var draw func(i int, prefix, branch string)
	draw = func(i int, prefix, branch string) {
		s := v.Steps[i]
		line := prefix + branch + s.Name + "  " + string(s.Status) + "  " + s.Run
		var also []string
		for _, p := range s.After {
			if j, ok := index[p]; ok && j != primary[i] {
				also = append(also, p)
			}
		}
		if len(also) > 0 {
			line += "  (also after " + strings.Join(also, ", ") + ")"
		}
		if s.Reason != "" {
			line += "  reason " + s.Reason
		} else if s.PendingReason != "" {
			line += "  " + s.PendingReason
		}
		b.WriteString(line + "\n")
		next := prefix
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		for k, c := range kids[i] {
			br := "├─ "
			if k == len(kids[i])-1 {
				br = "└─ "
			}
			draw(c, next, br)
		}
	}
	for _, r := range roots {
		draw(r, "", "")
	}
	return b.String()
}

func runPipelineRetry(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, `print the server's answer ({"id", "runs"})`)
	id, c, code, ok := inv.startOn(args, inv.pipelineID)
	if !ok {
		return code
	}
	var ans pipelineRuns
	raw, err := c.postJSON(inv.ctx, pipelinePath(id, "/retry"), nil, &ans)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	for _, step := range slices.Sorted(maps.Keys(ans.Runs)) {
		fmt.Fprintf(inv.env.Stdout, "%s %s\n", step, ans.Runs[step])
	}
	fmt.Fprintf(inv.env.Stderr, "pipeline %s: %d steps rerun\n", id, len(ans.Runs))
	return ExitOK
}
