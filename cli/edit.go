package cli

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "edit",
		args:    "ID [--name S] [--tag T ...] [--untag T ...] [--note S] [--baseline true|false] [--json]",
		summary: "Change a run's record: its name, tags, note or baseline mark (owner or admin).",
		details: "Any status: the record is the run's as a result, not its spec. --tag adds a tag and --untag\n" +
			"removes one (each repeatable), keeping the others, also those another edit adds meanwhile.\n" +
			"--note \"\" clears the note. A sweep member keeps its sweep's tag. Prints the record as written.",
		examples: []string{
			"rlsched edit $id --name 'ppo, lr 3e-4' --tag paper --untag draft",
			"rlsched edit $id --baseline true --note 'the reference for figure 2'",
			"rlsched ls --tag paper",
		},
		run: runEdit,
	})
}

// editBody is PATCH /api/tasks/{id}'s body: only the fields given.
type editBody struct {
	Name       *string  `json:"name,omitempty"`
	AddTags    []string `json:"addTags,omitempty"`
	RemoveTags []string `json:"removeTags,omitempty"`
	Note       *string  `json:"note,omitempty"`
	Baseline   *bool    `json:"baseline,omitempty"`
}

func runEdit(inv *invocation, args []string) int {
	fs := inv.newFlags()
	name := fs.String("name", "", "the run's new name `S`")
	var tags, untags multiFlag
	fs.Var(&tags, "tag", "add tag `T` (repeatable)")
	fs.Var(&untags, "untag", "remove tag `T` (repeatable)")
	note := fs.String("note", "", "the run's note `S` (\"\" clears it)")
	baseline := fs.String("baseline", "", "mark the run as a baseline: `true` or false")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	id, c, code, ok := inv.startOn(args, inv.runID)
	if !ok {
		return code
	}
	var b editBody
	if fs.isSet("name") {
		b.Name = name
	}
	if fs.isSet("note") {
		b.Note = note
	}
	if fs.isSet("baseline") {
		v, err := strconv.ParseBool(*baseline)
		if err != nil {
			return inv.usageError("--baseline takes true or false, not %q", *baseline)
		}
		b.Baseline = &v
	}
	b.AddTags, b.RemoveTags = tags, untags
	if b.Name == nil && b.Note == nil && b.Baseline == nil && len(tags) == 0 && len(untags) == 0 {
		return inv.usageError("nothing to change: give --name, --tag, --untag, --note or --baseline")
	}
	resp, err := c.do(inv.ctx, http.MethodPatch, taskPath(id, ""), nil, b, "")
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(resp.body)
	}
	var t core.Task
	if err := decodeInto(resp.body, &t, taskPath(id, "")); err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.env.Stdout, "name: %s\ntags: %s\nbaseline: %t\nnote: %s\n", orDash(t.Name), orDash(strings.Join(t.Tags, ",")), t.Baseline, orDash(oneLine(t.Note)))
	return ExitOK
}
