package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

func init() {
	register(&command{
		name:    "notify",
		args:    "show | set URL [--on EVENT,...] | off | test  [--json]",
		summary: "Your webhook for your runs' ends: show, set, turn off, send a test message.",
		details: `The master POSTs a Slack-compatible {"text": ..., "run": Task} to your webhook when one of
your runs reaches an event of --on: run statuses SUCCEEDED, FAILED, TIMEOUT, CANCELLED, LOST,
or warning codes idle_gpu, gpu_foreign, artifact_limit, worker_silent (default: every end). A
failed run's message has the last lines of its stderr. The master refuses hosts of its own
network (loopback, private, link-local) unless its NOTIFY_ALLOW_HOSTS names them; set checks
the URL as the master will. test sends one message now and says whether the webhook took it.
(GET, PUT /api/auth/me/notifications; POST /api/auth/me/notifications/test.)`,
		examples: []string{
			"rlsched notify set https://hooks.slack.com/services/T0/B0/xyz --on FAILED,TIMEOUT,LOST",
			"rlsched notify test",
			"rlsched notify show",
			"rlsched notify off",
		},
		run: runNotify,
	})
}

type notifySettings struct {
	Webhook string   `json:"webhook"`
	On      []string `json:"on"`
}

func runNotify(inv *invocation, args []string) int {
	fs := inv.newFlags()
	on := fs.String("on", "", "the `EVENTS` (comma-separated) set hears of; default every end")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	p, code, ok := inv.start(args, 1, 2)
	if !ok {
		return code
	}
	op, rest := p.pos[0], p.pos[1:]
	want := map[string]int{"show": 0, "set": 1, "off": 0, "test": 0}
	n, known := want[op]
	switch {
	case !known:
		return inv.usageError("unknown operation %q: use show, set, off or test", op)
	case len(rest) != n:
		return inv.usageError("%s takes %d argument(s), got %d", op, n, len(rest))
	case op != "set" && fs.isSet("on"):
		return inv.usageError("--on goes with set")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	const path = "/api/auth/me/notifications"
	var (
		raw []byte
		err error
		s   notifySettings
	)
	switch op {
	case "show":
		raw, err = c.getJSON(inv.ctx, path, nil, &s)
	case "set", "off":
		body := notifySettings{On: []string{}}
		if op == "set" {
			body.Webhook = rest[0]
			for _, e := range strings.Split(*on, ",") {
				if e = strings.TrimSpace(e); e != "" {
					body.On = append(body.On, e)
				}
			}
		}
		var resp *response
		if resp, err = c.do(inv.ctx, http.MethodPut, path, nil, body, ""); err == nil {
			raw = resp.body
			err = decodeInto(raw, &s, path)
		}
	case "test":
		var ans struct {
			Sent    bool   `json:"sent"`
			Webhook string `json:"webhook"`
			Error   string `json:"error"`
		}
		if raw, err = c.postJSON(inv.ctx, path+"/test", nil, &ans); err != nil {
			return inv.fail(err)
		}
		if *jsonOut {
			return inv.printJSON(raw)
		}
		if !ans.Sent {
			inv.errorf("the test message did not reach %s: %s", ans.Webhook, ans.Error)
			return ExitError
		}
		fmt.Fprintf(inv.env.Stdout, "sent a test message to %s\n", ans.Webhook)
		return ExitOK
	}
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	if s.Webhook == "" {
		fmt.Fprintln(inv.env.Stdout, "notifications: off (rlsched notify set URL turns them on)")
		return ExitOK
	}
	b, _ := json.Marshal(s.On)
	fmt.Fprintf(inv.env.Stdout, "notifications: %s on %s\n", s.Webhook, strings.Trim(strings.ReplaceAll(string(b), `"`, ""), "[]"))
	return ExitOK
}
