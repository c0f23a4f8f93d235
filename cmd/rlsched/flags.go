package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// errHelp: --help was asked for and printed; the command exits 0.
var errHelp = errors.New("help printed")

// serverHelp is the text above the flags of a server command's --help.
var serverHelp = map[string]string{
	"up": `usage: rlsched up [flags]

A master, a gateway in front of it and --workers local workers, in this one process, on
SQLite and in-memory leases: everything on one machine (make run). The local workers run
inside it, so stopping one stops all; more of them: --workers N; a worker of its own (another
shell, another machine) joins with the WORKER_JOIN_TOKEN of DATA_DIR/master/secrets.env:

  WORKER_JOIN_TOKEN_FILE=tokenfile rlsched worker --master 127.0.0.1:RPC --data-dir DIR

(RPC: the port up prints). The CLI on this machine talks to the URL it prints.`,
	"master": `usage: rlsched master [flags]

The master: the REST API, the dashboard and /ws on MASTER_PORT, the workers' RPC on RPC_PORT.`,
	"gateway": `usage: rlsched gateway --masters URL[,URL...] [flags]

The gateway in front of masters: JWT, rate limits, canary routing, identity signing, fallback.`,
	"worker": `usage: rlsched worker --master HOST:PORT[,HOST:PORT...] [flags]

A worker agent: joins the masters (with WORKER_JOIN_TOKEN_FILE, WORKER_JOIN_TOKEN or
WORKER_KEY_FILE) and runs what they place on its GPUs (nvidia-smi, else --gpus N) and CPU
slots. Its identity is its --data-dir.`,
}

// envFlags defines flags whose defaults come from the environment, so every
// setting of API.md's Configuration is both an env variable and a flag.
type envFlags struct{ *flag.FlagSet }

func newFlags(name string) envFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		if h := serverHelp[name]; h != "" {
			fmt.Fprintf(fs.Output(), "%s\n\nflags (most also an environment variable, named in their text):\n", h)
		} else {
			fmt.Fprintf(fs.Output(), "usage: rlsched %s [flags]\n\nflags:\n", name)
		}
		fs.PrintDefaults()
	}
	return envFlags{fs}
}

func (f envFlags) str(p *string, name, env, def, help string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		def = v
	}
	if env != "" {
		help += " (env " + env + ")"
	}
	f.StringVar(p, name, def, help)
}

func (f envFlags) int(p *int, name, env string, def int, help string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		}
	}
	if env != "" {
		help += " (env " + env + ")"
	}
	f.IntVar(p, name, def, help)
}

func (f envFlags) parse(args []string) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			f.SetOutput(os.Stdout) // asked for: it is the answer, not an error
			f.Usage()
			return errHelp
		}
	}
	if err := f.Parse(args); err != nil {
		return usageError{err}
	}
	if f.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %v", f.Args())}
	}
	return nil
}

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

func (f envFlags) int64(p *int64, name, env string, def int64, help string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			def = n
		}
	}
	if env != "" {
		help += " (env " + env + ")"
	}
	f.Int64Var(p, name, def, help)
}

// seconds binds a flag given in whole seconds to a duration.
func (f envFlags) seconds(p *time.Duration, name, env string, def int, help string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		}
	}
	if env != "" {
		help += " (env " + env + ")"
	}
	*p = seconds(def)
	f.Var((*secondsValue)(p), name, help)
}

// secondsValue is a duration read and shown as whole seconds.
type secondsValue time.Duration

func (s *secondsValue) String() string { return strconv.Itoa(int(time.Duration(*s) / time.Second)) }

func (s *secondsValue) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want whole seconds: %w", err)
	}
	*s = secondsValue(seconds(n))
	return nil
}

// duration binds a flag given as a Go duration ("168h", "30m").
func (f envFlags) duration(p *time.Duration, name, env string, def time.Duration, help string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	if env != "" {
		help += " (env " + env + ")"
	}
	f.DurationVar(p, name, def, help)
}

func (f envFlags) float64(p *float64, name, env string, def float64, help string) {
	if v, ok := os.LookupEnv(env); ok && env != "" {
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			def = n
		}
	}
	if env != "" {
		help += " (env " + env + ")"
	}
	f.Float64Var(p, name, def, help)
}
