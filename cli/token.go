package cli

import (
	"fmt"
)

func init() {
	register(&command{
		name:    "token",
		args:    "[--server URL]",
		summary: "Print the token the CLI sends, for scripts and curl.",
		details: `Prints, alone on standard output, the token the other commands send to the server:
$RLSCHED_TOKEN when set, else the one login saved for that server. It is a password for as
long as it lives (logout ends it): keep it out of shell history and logs.`,
		examples: []string{
			`TOKEN=$(rlsched token)`,
			`curl -H "Authorization: Bearer $(rlsched token)" http://127.0.0.1:8081/api/auth/me`,
		},
		run: runToken,
	})
}

func runToken(inv *invocation, args []string) int {
	inv.newFlags()
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if c.token == "" {
		inv.errorf("not signed in to %s: run `rlsched login -u NAME` first", c.base)
		return ExitError
	}
	fmt.Fprintln(inv.env.Stdout, c.token)
	return ExitOK
}
