package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// envFlags defines flags whose defaults come from the environment, so every
// setting of API.md's Configuration is both an env variable and a flag.
type envFlags struct{ *flag.FlagSet }

func newFlags(name string) envFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
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
