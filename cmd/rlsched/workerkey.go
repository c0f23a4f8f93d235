package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/core"
)

const workerKeyUsage = `usage: rlsched worker-key [--join-token-file FILE] ID

Prints the key of worker ID: derived from the master's join token
(WORKER_JOIN_TOKEN, or the file WORKER_JOIN_TOKEN_FILE names), it lets that
worker, and no other, join the masters of that token. Give it to the worker's
machine instead of the join token: in a file of mode 0600 named by
WORKER_KEY_FILE (or in WORKER_KEY), with --id ID.
`

// runWorkerKey prints hex(K_w) of the worker id in args.
func runWorkerKey(args []string, stdout io.Writer) error {
	f := newFlags("worker-key")
	var tokenFile string
	f.str(&tokenFile, "join-token-file", "WORKER_JOIN_TOKEN_FILE", "", "file holding the join token, mode 0600 (instead of env WORKER_JOIN_TOKEN)")
	f.Usage = func() {
		fmt.Fprint(f.Output(), workerKeyUsage)
		f.PrintDefaults()
	}
	if err := f.Parse(args); err != nil {
		return usageError{err}
	}
	if f.NArg() != 1 {
		return usageError{errors.New("give one worker id: rlsched worker-key ID")}
	}
	id := f.Arg(0)
	if !core.ValidWorkerID(id) {
		return usageError{fmt.Errorf("%q is not a worker id: use [A-Za-z0-9_-]{1,64}", id)}
	}
	token, err := joinToken(tokenFile)
	if err != nil {
		return err
	}
	if token == "" {
		return errors.New("WORKER_JOIN_TOKEN is not set: run this where the master's join token is, with WORKER_JOIN_TOKEN_FILE (or WORKER_JOIN_TOKEN) set")
	}
	if err := codec.CheckJoinToken(token); err != nil {
		return fmt.Errorf("WORKER_JOIN_TOKEN: %w", err)
	}
	_, err = fmt.Fprintln(stdout, hex.EncodeToString(codec.WorkerKey([]byte(token), id)))
	return err
}
