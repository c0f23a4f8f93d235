package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "user",
		args:    "ls [--json] | role NAME USER|ADMIN | disable NAME | enable NAME | passwd NAME [-p PASSWORD | --password-stdin] | rm NAME",
		summary: "Manage users (admins): list, change a role, disable, enable, reset a password, delete.",
		details: "A disabled user's sign-ins end at once and they cannot sign in until enabled; a deleted\n" +
			"user's runs stay, owned by \"deleted user N\", and the name is free again. The last enabled\n" +
			"admin cannot be demoted, disabled or deleted. These go through the REST API, whatever the\n" +
			"store. `rlsched user add NAME [--admin]` writes a user straight into the store instead\n" +
			"(run it on the master's host: the first admin of a closed server).",
		examples: []string{
			"rlsched user ls",
			"rlsched user role alice ADMIN",
			"rlsched user disable bob",
			"rlsched user passwd bob --password-stdin <<< \"$NEW_PASSWORD\"",
		},
		run: runUserAdmin,
	})
}

type adminUser struct {
	ID          int64      `json:"id"`
	Username    string     `json:"username"`
	Role        string     `json:"role"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"createdAt"`
	LastLoginAt *time.Time `json:"lastLoginAt"`
	Runs        int        `json:"runs"`
	ActiveRuns  int        `json:"activeRuns"`
	GPUSeconds  float64    `json:"gpuSeconds"`
}

func runUserAdmin(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	password := fs.String("p", "", "the new `PASSWORD` of passwd (visible to other local users in ps; prefer --password-stdin)")
	stdin := fs.Bool("password-stdin", false, "read the new password of passwd from standard input (its first line)")
	p, code, ok := inv.start(args, 1, 3)
	if !ok {
		return code
	}
	op, rest := p.pos[0], p.pos[1:]
	want := map[string]int{"ls": 0, "role": 2, "disable": 1, "enable": 1, "passwd": 1, "rm": 1}
	n, known := want[op]
	switch {
	case op == "add":
		return inv.usageError("`rlsched user add NAME` writes the store itself: run it on the master's host")
	case !known:
		return inv.usageError("unknown operation %q: use ls, role, disable, enable, passwd or rm", op)
	case len(rest) != n:
		return inv.usageError("%s takes %d argument(s), got %d", op, n, len(rest))
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if op == "ls" {
		var ans struct {
			Items []adminUser `json:"items"`
		}
		raw, err := c.getJSON(inv.ctx, "/api/admin/users", nil, &ans)
		if err != nil {
			return inv.fail(adminHint(err))
		}
		if *jsonOut {
			return inv.printJSON(raw)
		}
		return inv.printUsers(ans.Items)
	}
	name := rest[0]
	if !core.ValidUsername(name) {
		return inv.usageError("invalid user name %q: use 3–32 of A-Z a-z 0-9 _ . -", name)
	}
	path := "/api/admin/users/" + url.PathEscape(name)
	var body map[string]any
	switch op {
	case "role":
		role := strings.ToUpper(rest[1])
		if role != string(core.RoleUser) && role != string(core.RoleAdmin) {
			return inv.usageError("the role is USER or ADMIN, not %q", rest[1])
		}
		body = map[string]any{"role": role}
	case "disable", "enable":
		body = map[string]any{"disabled": op == "disable"}
	case "passwd":
		pw := *password
		if inv.fs.isSet("p") == *stdin {
			return inv.usageError("give the new password with -p PASSWORD or --password-stdin")
		}
		if *stdin {
			b, err := io.ReadAll(io.LimitReader(inv.env.Stdin, 64<<10))
			if err != nil {
				return inv.fail(fmt.Errorf("cannot read the password from standard input: %w", err))
			}
			line, _, _ := strings.Cut(string(b), "\n")
			pw = strings.TrimSuffix(line, "\r")
		}
		body = map[string]any{"password": pw}
	}
	var u adminUser
	if op == "rm" {
		if _, err := c.do(inv.ctx, http.MethodDelete, path, nil, nil, ""); err != nil {
			return inv.fail(adminHint(err))
		}
		fmt.Fprintf(inv.env.Stdout, "deleted %s; their runs stay\n", name)
		return ExitOK
	}
	resp, err := c.do(inv.ctx, http.MethodPatch, path, nil, body, "")
	if err == nil {
		err = decodeInto(resp.body, &u, path)
	}
	if err != nil {
		return inv.fail(adminHint(err))
	}
	switch op {
	case "passwd":
		fmt.Fprintf(inv.env.Stdout, "new password set for %s; their sign-ins have ended\n", u.Username)
	default:
		fmt.Fprintf(inv.env.Stdout, "%s: %s, %s\n", u.Username, u.Role, userState(u))
	}
	return ExitOK
}

func userState(u adminUser) string {
	if u.Disabled {
		return "disabled"
	}
	return "enabled"
}

func (inv *invocation) printUsers(us []adminUser) int {
	now := inv.env.now()
	t := newTable("ID", "USER", "ROLE", "STATE", "RUNS", "ACTIVE", "GPU HOURS", "LAST SIGN-IN", "CREATED")
	for _, u := range us {
		last := "never"
		if u.LastLoginAt != nil {
			last = age(now, *u.LastLoginAt) + " ago"
		}
		t.rowf("%d\t%s\t%s\t%s\t%d\t%d\t%.1f\t%s\t%s\n", u.ID, u.Username, u.Role, userState(u),
			u.Runs, u.ActiveRuns, u.GPUSeconds/3600, last, u.CreatedAt.UTC().Format("2006-01-02"))
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	return ExitOK
}

// adminHint says what a refusal of an admin command means.
func adminHint(err error) error {
	if ae, ok := err.(*apiError); ok {
		switch ae.Status {
		case http.StatusForbidden:
			ae.Hint = "only an admin may do this: log in as one (`rlsched login -u ADMIN`)"
		case http.StatusNotFound:
			if ae.Hint == "" { // a caller's own (`workers`) says what was not found
				ae.Hint = "list the users with `rlsched user ls`"
			}
		}
	}
	return err
}
