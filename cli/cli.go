// Package cli implements the client subcommands of the rlsched binary
// (register, login, submit, ls, logs, ...): thin wrappers around the REST API
// of API.md. It only talks HTTP to a master or gateway and reads/writes the
// credentials file in the config directory; it never touches a store, a
// worker or the scheduler directly, and it never calls os.Exit: Run returns
// the exit code.
//
// Exit codes: 0 success, 1 an error from the server or the network (or a
// waited-for run that did not succeed), 2 a usage error.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Exit codes returned by Run.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// DefaultServer is used when neither --server, RLSCHED_SERVER, a saved
// login nor a running `rlsched up` (upServerFile) names one: a master on
// this machine.
const DefaultServer = "http://127.0.0.1:8082"

// Env is what a command may touch of the outside world. Zero fields take the
// process's own: os.Stdout, os.Stderr, os.Stdin, os.Getenv, the current
// directory, and ConfigDir = $RLSCHED_CONFIG_DIR or os.UserConfigDir()/rlsched.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	ConfigDir      string

	// Stdin is read by --password-stdin; default os.Stdin.
	Stdin io.Reader
	// Dir is the working directory (default workdir of a command submission,
	// where the git commit is read); default os.Getwd().
	Dir string

	// Test hooks: poll intervals and clock; ttyOut and ttyErr treat Stdout
	// and Stderr as terminals.
	waitEvery time.Duration // submit --wait: GET /api/tasks/{id}
	logsEvery time.Duration // logs -f
	now       func() time.Time
	ttyOut    bool
	ttyErr    bool
}

const (
	defaultWaitEvery = 500 * time.Millisecond
	defaultLogsEvery = 200 * time.Millisecond
)

func (e Env) withDefaults() Env {
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.ConfigDir == "" {
		e.ConfigDir = e.Getenv("RLSCHED_CONFIG_DIR")
	}
	if e.ConfigDir == "" {
		if d, err := os.UserConfigDir(); err == nil {
			e.ConfigDir = d + string(os.PathSeparator) + "rlsched"
		}
	}
	if e.Dir == "" {
		if d, err := os.Getwd(); err == nil {
			e.Dir = d
		}
	}
	if e.waitEvery <= 0 {
		e.waitEvery = defaultWaitEvery
	}
	if e.logsEvery <= 0 {
		e.logsEvery = defaultLogsEvery
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e
}

// command is one client subcommand.
type command struct {
	name     string
	args     string // synopsis after the name
	summary  string // one line
	details  string // paragraphs after the synopsis in --help
	examples []string
	// argv: the command takes a command to run after --.
	argv bool
	run  func(inv *invocation, args []string) int
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// Commands lists the subcommand names Run handles, sorted.
func Commands() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// order is the order of Usage's listing: the usual workflow first.
var order = []string{"register", "login", "logout", "whoami", "token", "submit", "sweep", "pipeline", "ls", "show", "edit", "logs", "shell", "attach", "notebook",
	"cancel", "rerun", "queue", "metrics", "artifacts", "download", "diff", "code", "code-diff", "workers", "gpus", "user", "quota", "notify"}

// Usage writes one line per client command, for the binary's top-level help.
func Usage(w io.Writer) {
	seen := map[string]bool{}
	names := append([]string(nil), order...)
	for _, n := range Commands() {
		if !contains(order, n) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		c := commands[n]
		if c == nil || seen[n] {
			continue
		}
		seen[n] = true
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
}

// Run runs the client subcommand name with its arguments (those after the
// name) and returns the process exit code. It is safe to call from several
// goroutines with different Envs.
func Run(ctx context.Context, name string, args []string, env Env) int {
	env = env.withDefaults()
	// Terminal controls in what the CLI prints are shown, not obeyed
	// (safeWriter): always on stderr (messages), and on stdout when it is a
	// terminal; into a file or a pipe, stdout carries the server's bytes
	// exactly (a log is the run's output).
	rawOut, rawErr := env.Stdout, env.Stderr
	safeErr := newSafeWriter(rawErr)
	defer safeErr.flush()
	env.Stderr = safeErr
	if env.ttyOut || env.isTerminal(rawOut) {
		safeOut := newSafeWriter(rawOut)
		defer safeOut.flush()
		env.Stdout = safeOut
	}
	c := commands[name]
	if c == nil {
		fmt.Fprintf(env.Stderr, "rlsched: unknown command %q; client commands are: %s\n",
			name, strings.Join(Commands(), ", "))
		return ExitUsage
	}
	if ctx == nil {
		ctx = context.Background()
	}
	inv := &invocation{ctx: ctx, env: env, cmd: c, rawStdout: rawOut, rawStderr: rawErr}
	return c.run(inv, args)
}

// invocation is one run of one command.
type invocation struct {
	ctx context.Context
	// env's Stderr, and Stdout on a terminal, show terminal controls in
	// what they print (safeWriter); rawStdout and rawStderr are the writers
	// as given, for the CLI's own escapes and logs --raw.
	env                  Env
	rawStdout, rawStderr io.Writer
	cmd                  *command
	fs                   *flagSet
	server               string // value of --server
}

// errorf prints "rlsched NAME: msg" on stderr.
func (inv *invocation) errorf(format string, a ...any) {
	fmt.Fprintf(inv.env.Stderr, "rlsched %s: %s\n", inv.cmd.name, fmt.Sprintf(format, a...))
}

// usageError prints the problem, the synopsis and where to find help; it
// returns ExitUsage.
func (inv *invocation) usageError(format string, a ...any) int {
	inv.errorf(format, a...)
	fmt.Fprintf(inv.env.Stderr, "usage: rlsched %s %s\nrun `rlsched %s --help` for the flags\n",
		inv.cmd.name, inv.cmd.args, inv.cmd.name)
	return ExitUsage
}

// fail reports err (from the server, the network or the file system) and
// returns ExitError.
func (inv *invocation) fail(err error) int {
	var ae *apiError
	var ne *netError
	switch {
	case errors.As(err, &ae):
		inv.errorf("%s", ae.Error())
		if ae.TraceID != "" {
			fmt.Fprintf(inv.env.Stderr, "  trace id: %s\n", ae.TraceID)
		}
		if ae.Hint != "" {
			fmt.Fprintf(inv.env.Stderr, "  %s\n", ae.Hint)
		}
	case errors.As(err, &ne):
		inv.errorf("%s", ne.Error())
		if ne.TraceID != "" {
			fmt.Fprintf(inv.env.Stderr, "  trace id: %s\n", ne.TraceID)
		}
		if !ne.Interrupted {
			fmt.Fprintf(inv.env.Stderr, "  is the server running? pick another with --server URL or RLSCHED_SERVER\n")
		}
	default:
		inv.errorf("%s", err.Error())
	}
	return ExitError
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
