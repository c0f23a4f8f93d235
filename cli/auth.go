package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "register",
		args:    "-u NAME [-p PASSWORD | --password-stdin]",
		summary: "Create an account (POST /api/auth/register).",
		details: "The user name is 3–32 of A-Z a-z 0-9 _ . -; the password has at least 8 characters.\n" +
			"The first user of an empty system is an admin. Log in afterwards with `rlsched login`.",
		examples: []string{"rlsched register -u alice --password-stdin < pw.txt"},
		run:      runRegister,
	})
	register(&command{
		name:    "login",
		args:    "-u NAME [-p PASSWORD | --password-stdin]",
		summary: "Log in and save the token for later commands.",
		details: "The server, token and user name are saved in CONFIG_DIR/credentials.json (mode 0600),\n" +
			"CONFIG_DIR being $RLSCHED_CONFIG_DIR or your user config directory + /rlsched.\n" +
			"Later commands send the token to that server; RLSCHED_TOKEN, when set, overrides it.",
		examples: []string{
			"rlsched login -u alice --password-stdin <<< \"$PASSWORD\"",
			"rlsched login --server http://gpu-box:8081 -u alice -p secret123",
		},
		run: runLogin,
	})
	register(&command{
		name:    "logout",
		args:    "",
		summary: "Forget the saved token.",
		run:     runLogout,
	})
	register(&command{
		name:    "whoami",
		args:    "[--json]",
		summary: "Show the user the server sees (GET /api/auth/me).",
		run:     runWhoami,
	})
}

type userInfo struct {
	ID       int64     `json:"id"`
	Username string    `json:"username"`
	Role     core.Role `json:"role"`
	// What the user's runs' outputs keep and may keep (GET /api/auth/me
	// only; nil from a server before issue 25).
	ArtifactBytes      *int64 `json:"artifactBytes"`
	ArtifactLimitBytes int64  `json:"artifactLimitBytes"`
}

// passwordFlags adds -u/-p/--password-stdin.
type passwordFlags struct {
	user, password string
	stdin          bool
}

func (inv *invocation) addPasswordFlags(pf *passwordFlags) {
	fs := inv.newFlags()
	fs.StringVar(&pf.user, "u", "", "user `NAME`")
	fs.alias("username", "u")
	fs.StringVar(&pf.password, "p", "", "`PASSWORD` (visible to other local users in ps; prefer --password-stdin)")
	fs.alias("password", "p")
	fs.BoolVar(&pf.stdin, "password-stdin", false, "read the password from standard input (its first line)")
}

// credentialsFromFlags checks -u and reads the password; ok=false: exit with code.
func (inv *invocation) credentialsFromFlags(pf *passwordFlags) (code int, ok bool) {
	if pf.user == "" {
		return inv.usageError("missing -u NAME"), false
	}
	if inv.fs.isSet("p") && pf.stdin {
		return inv.usageError("give either -p or --password-stdin, not both"), false
	}
	if pf.stdin {
		b, err := io.ReadAll(io.LimitReader(inv.env.Stdin, 64<<10))
		if err != nil {
			return inv.fail(fmt.Errorf("cannot read the password from standard input: %w", err)), false
		}
		line, _, _ := strings.Cut(string(b), "\n")
		pf.password = strings.TrimSuffix(line, "\r")
	}
	if pf.password == "" {
		return inv.usageError("missing password: pass -p PASSWORD or --password-stdin"), false
	}
	return ExitOK, true
}

func runRegister(inv *invocation, args []string) int {
	var pf passwordFlags
	inv.addPasswordFlags(&pf)
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	if code, ok := inv.credentialsFromFlags(&pf); !ok {
		return code
	}
	if !core.ValidUsername(pf.user) {
		return inv.usageError("invalid user name %q: use 3–32 of A-Z a-z 0-9 _ . -", pf.user)
	}
	if utf8.RuneCountInString(pf.password) < 8 {
		return inv.usageError("the password is too short: use at least 8 characters")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	c.token = "" // registering needs no token
	var u userInfo
	if _, err := c.postJSON(inv.ctx, "/api/auth/register",
		map[string]string{"username": pf.user, "password": pf.password}, &u); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusConflict {
			ae.Hint = fmt.Sprintf("pick another name, or log in with `rlsched login -u %s`", pf.user)
		}
		return inv.fail(err)
	}
	if u.Username == "" {
		u.Username = pf.user
	}
	fmt.Fprintf(inv.env.Stdout, "registered %s (%s) on %s\n", u.Username, orDash(string(u.Role)), c.base)
	fmt.Fprintf(inv.env.Stderr, "next: rlsched login -u %s\n", u.Username)
	return ExitOK
}

func runLogin(inv *invocation, args []string) int {
	var pf passwordFlags
	inv.addPasswordFlags(&pf)
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	if code, ok := inv.credentialsFromFlags(&pf); !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	c.token = "" // never send an old token along with a password
	var ans struct {
		Token     string   `json:"token"`
		ExpiresAt string   `json:"expiresAt"`
		User      userInfo `json:"user"`
	}
	if _, err := c.postJSON(inv.ctx, "/api/auth/login",
		map[string]string{"username": pf.user, "password": pf.password}, &ans); err != nil {
		return inv.fail(err)
	}
	if ans.Token == "" {
		return inv.fail(fmt.Errorf("the server at %s answered the login without a token: is it an rlsched server?", c.base))
	}
	name := ans.User.Username
	if name == "" {
		name = pf.user
	}
	path, err := inv.saveCredentials(credentials{Server: c.base, Token: ans.Token, Username: name, ExpiresAt: ans.ExpiresAt})
	if err != nil {
		return inv.fail(err)
	}
	fmt.Fprintf(inv.env.Stdout, "logged in to %s as %s", c.base, name)
	if ans.User.Role != "" {
		fmt.Fprintf(inv.env.Stdout, " (%s)", ans.User.Role)
	}
	fmt.Fprintln(inv.env.Stdout)
	fmt.Fprintf(inv.env.Stderr, "token saved in %s", path)
	if exp, err := time.Parse(time.RFC3339, ans.ExpiresAt); err == nil {
		fmt.Fprintf(inv.env.Stderr, ", valid until %s", exp.Local().Format("2006-01-02 15:04"))
	}
	fmt.Fprintln(inv.env.Stderr)
	if inv.env.Getenv("RLSCHED_TOKEN") != "" {
		fmt.Fprintf(inv.env.Stderr, "note: RLSCHED_TOKEN is set and overrides the saved token\n")
	}
	return ExitOK
}

func runLogout(inv *invocation, args []string) int {
	inv.newFlags()
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	saved := inv.loadCredentials()
	if saved != nil && saved.Server != "" && saved.Token != "" {
		// The server revokes the user's tokens (every sign-in of the user
		// ends); the local file goes whatever it answers.
		if base, err := normalizeServer(saved.Server); err == nil {
			c := &client{base: base, token: saved.Token, hc: &http.Client{Timeout: 3 * time.Second}}
			ctx, cancel := context.WithTimeout(inv.ctx, 3*time.Second)
			_, err := c.do(ctx, http.MethodPost, "/api/auth/logout", nil, nil, "")
			cancel()
			var ne *netError
			if errors.As(err, &ne) {
				fmt.Fprintf(inv.env.Stderr, "warning: cannot reach %s to revoke the token; it stays valid until it expires\n", base)
			}
		}
	}
	removed, err := inv.removeCredentials()
	if err != nil {
		return inv.fail(err)
	}
	if !removed {
		fmt.Fprintln(inv.env.Stdout, "not logged in")
	} else {
		fmt.Fprintf(inv.env.Stdout, "logged out of %s\n", saved.Server)
	}
	if inv.env.Getenv("RLSCHED_TOKEN") != "" {
		fmt.Fprintf(inv.env.Stderr, "note: RLSCHED_TOKEN is still set; unset it to stop using that token\n")
	}
	return ExitOK
}

func runWhoami(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var u userInfo
	raw, err := c.getJSON(inv.ctx, "/api/auth/me", nil, &u)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	fmt.Fprintf(inv.env.Stdout, "%s (%s) on %s\n", u.Username, orDash(string(u.Role)), c.base)
	if u.ArtifactBytes != nil {
		limit := "no limit"
		if u.ArtifactLimitBytes > 0 {
			limit = humanBytes(u.ArtifactLimitBytes)
		}
		fmt.Fprintf(inv.env.Stdout, "outputs kept: %s of %s\n", humanBytes(*u.ArtifactBytes), limit)
	}
	return ExitOK
}
