// Command rlsched is the one binary of rlsched: `up` (everything on one
// machine), `master`, `worker`, `user`, and the client commands of package
// cli. This package only parses flags and wires packages together: it must
// never hold a rule of a room (a flag's meaning is checked where it is used,
// in the Config of masterd, gatewayd or worker).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/rlsched/rlsched/cli"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/secure"
	"github.com/rlsched/rlsched/worker"
)

const usage = `rlsched: share GPU machines for reinforcement-learning runs.

Servers:
  up       master + local workers on embedded defaults (SQLite, in-memory leases)
  master   the master: REST on MASTER_PORT, worker RPC on RPC_PORT
  gateway  the gateway in front of masters: JWT, rate limit, canary, signing, fallback
  worker   a worker agent: rlsched worker --master host:port
  user     rlsched user add NAME [--admin]: add a user straight into the store (SQLite or MYSQL_DSN),
           e.g. the first admin; user ls|role|disable|enable|passwd|rm go through REST (client)
  worker-key  print the key of one worker id, to give its machine instead of the join token

Client (talk REST to --server; default: the URL a running rlsched up printed, else http://127.0.0.1:8082):
  %s

Run 'rlsched COMMAND --help' for the flags of a command.
`

func main() {
	worker.MaybeGuard() // the orphan guard re-executes this binary
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, usage, cli.Commands())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	name, args := os.Args[1], os.Args[2:]
	if slices.Contains([]string{"up", "master", "gateway", "worker", "worker-key"}, name) {
		// Servers hold secrets (their environment, keys in memory), and
		// worker-key the join token: no process of the same uid (a run
		// where runs share it) may read them through /proc or ptrace.
		if err := secure.NoDump(); err != nil {
			fmt.Fprintln(os.Stderr, "rlsched: warning:", err)
		}
	}
	var err error
	switch {
	case name == "up":
		err = runUp(ctx, args)
	case name == "master":
		err = runMaster(ctx, args)
	case name == "gateway":
		err = runGateway(ctx, args)
	case name == "worker":
		err = runWorker(ctx, args)
	case name == "user" && len(args) > 0 && args[0] == "add": // the store itself; the rest is REST (cli)
		err = runUser(ctx, args)
	case name == "worker-key":
		err = runWorkerKey(args, os.Stdout)
	case name == "version" || name == "--version":
		fmt.Println("rlsched", core.Version)
	case name == "help" || name == "-h" || name == "--help":
		fmt.Printf(usage, cli.Commands())
	case slices.Contains(cli.Commands(), name):
		os.Exit(cli.Run(ctx, name, args, cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
	default:
		fmt.Fprintf(os.Stderr, "rlsched: unknown command %q\n\n", name)
		fmt.Fprintf(os.Stderr, usage, cli.Commands())
		os.Exit(2)
	}
	if errors.Is(err, errHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsched:", err)
		if _, ok := err.(usageError); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }
