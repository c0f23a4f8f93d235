package cli

import (
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// afterRequest is one element of a submission's after (API.md
// "Dependencies"): a run, a sweep or, in a pipeline file, a step.
type afterRequest struct {
	Run   string `json:"run,omitempty"`
	Sweep string `json:"sweep,omitempty"`
	Step  string `json:"step,omitempty"`
	When  string `json:"when,omitempty"`
}

// depFlags are submit's and sweep's flags of dependencies.
type depFlags struct{ after, afterOK, afterSweep, inputs multiFlag }

func (d *depFlags) define(fs *flagSet) {
	fs.Var(&d.after, "after", "start once run `ID` ended, however it ended (repeatable)")
	fs.Var(&d.afterOK, "after-ok", "start once run `ID` SUCCEEDED; cancelled if it ends otherwise (repeatable)")
	fs.Var(&d.afterSweep, "after-sweep", "start once every member of sweep `ID` ended (repeatable)")
	fs.Var(&d.inputs, "inputs-from", "find the output files of run `ID`, one of --after/--after-ok, in RLSCHED_INPUT_DIR/ID/ (repeatable)")
}

// apply puts the flags into req; "" when they are well formed, else the
// usage problem.
func (d *depFlags) apply(req *submitRequest) string {
	add := func(ids []string, flag, when string, sweep bool) string {
		for _, id := range ids {
			if !core.ValidTaskID(id) {
				return "invalid --" + flag + " " + id + ": give a run or sweep id"
			}
			a := afterRequest{Run: id, When: when}
			if sweep {
				a = afterRequest{Sweep: id, When: when}
			}
			req.After = append(req.After, a)
		}
		return ""
	}
	if p := add(d.after, "after", core.WhenEnded, false); p != "" {
		return p
	}
	if p := add(d.afterOK, "after-ok", core.WhenSucceeded, false); p != "" {
		return p
	}
	if p := add(d.afterSweep, "after-sweep", core.WhenEnded, true); p != "" {
		return p
	}
	for _, id := range d.inputs {
		if !core.ValidTaskID(id) {
			return "invalid --inputs-from " + id + ": give a run id"
		}
		req.InputsFrom = append(req.InputsFrom, id)
	}
	return ""
}

// afterLine shows a run's parents, "ID (when)" each, the first ten.
func afterLine(after []core.Dep) string {
	if len(after) == 0 {
		return "-"
	}
	parts := make([]string, 0, min(len(after), 10))
	for i, d := range after {
		if i == 10 {
			parts = append(parts, "and "+strconv.Itoa(len(after)-10)+" more")
			break
		}
		parts = append(parts, d.Run+" ("+d.When+")")
	}
	return strings.Join(parts, ", ")
}
