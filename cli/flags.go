package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// flagSet wraps flag.FlagSet with what the client commands need: flags
// anywhere among the positional arguments (`show ID --json`), `--` ending the
// flags (`submit --gpus 1 -- python3 train.py`), aliases and a help text that
// spells long flags with two dashes.
type flagSet struct {
	*flag.FlagSet
	aliases map[string]string // alias -> canonical name
	set     map[string]bool   // canonical names given on the command line
}

func (inv *invocation) newFlags() *flagSet {
	fs := &flagSet{
		FlagSet: flag.NewFlagSet(inv.cmd.name, flag.ContinueOnError),
		aliases: map[string]string{},
		set:     map[string]bool{},
	}
	fs.SetOutput(io.Discard)
	fs.StringVar(&inv.server, "server", "", "server `URL` (default $RLSCHED_SERVER, else the server of the last login, else the URL a running rlsched up printed, else "+DefaultServer+")")
	inv.fs = fs
	return fs
}

// alias makes -alias the same flag as -name.
func (fs *flagSet) alias(alias, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("BUG: alias of unknown flag " + name)
	}
	fs.Var(f.Value, alias, f.Usage)
	fs.aliases[alias] = name
}

// isSet reports whether the flag (or an alias of it) was on the command line.
func (fs *flagSet) isSet(name string) bool { return fs.set[name] }

type boolFlag interface{ IsBoolFlag() bool }

// parsed is the result of parseArgs.
type parsed struct {
	pos     []string // positional arguments, flags removed
	rest    []string // everything after `--`
	dash    bool     // `--` was given
	help    bool     // -h / --help
	problem string   // usage error
}

// parse splits args into flags and positional arguments and parses the flags.
func (fs *flagSet) parse(args []string) parsed {
	var p parsed
	var flagArgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			p.dash = true
			p.rest = append([]string{}, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			p.pos = append(p.pos, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		hasValue := false
		if k := strings.IndexByte(name, '='); k >= 0 {
			name, hasValue = name[:k], true
		}
		if name == "h" || name == "help" {
			p.help = true
			return p
		}
		f := fs.Lookup(name)
		if f == nil {
			p.problem = fmt.Sprintf("unknown flag %s", a)
			return p
		}
		flagArgs = append(flagArgs, a)
		if canon, ok := fs.aliases[name]; ok {
			name = canon
		}
		fs.set[name] = true
		if bf, ok := f.Value.(boolFlag); ok && bf.IsBoolFlag() || hasValue {
			continue
		}
		if i+1 >= len(args) {
			p.problem = fmt.Sprintf("flag %s needs a value", a)
			return p
		}
		i++
		flagArgs = append(flagArgs, args[i])
	}
	if err := fs.FlagSet.Parse(flagArgs); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			p.help = true
			return p
		}
		p.problem = strings.Replace(err.Error(), "flag provided but not defined", "unknown flag", 1)
	}
	return p
}

// start parses args for the command and handles --help and flag errors.
// ok=false means the command is over and code is its exit code.
func (inv *invocation) start(args []string, minPos, maxPos int) (p parsed, code int, ok bool) {
	return inv.startParsed(inv.fs.parse(args), minPos, maxPos)
}

func (inv *invocation) startParsed(p parsed, minPos, maxPos int) (parsed, int, bool) {
	switch {
	case p.help:
		inv.help(inv.env.Stdout)
		return p, ExitOK, false
	case p.problem != "":
		return p, inv.usageError("%s", p.problem), false
	case p.dash && !inv.cmd.argv:
		return p, inv.usageError("unexpected `--`"), false
	case len(p.pos) < minPos:
		return p, inv.usageError("missing argument %s", strings.Fields(inv.cmd.args)[len(p.pos)]), false
	case maxPos >= 0 && len(p.pos) > maxPos:
		return p, inv.usageError("unexpected argument %q", p.pos[maxPos]), false
	}
	return p, ExitOK, true
}

// startID is start for a command whose first argument is the id of what it
// acts on, checked with idOf (runID, sweepID); at most maxPos arguments
// (-1: any number).
func (inv *invocation) startID(args []string, maxPos int, idOf func(parsed) (string, int, bool)) (p parsed, id string, code int, ok bool) {
	if p, code, ok = inv.start(args, 1, maxPos); !ok {
		return p, "", code, false
	}
	id, code, ok = idOf(p)
	return p, id, code, ok
}

// startOn is startID for a command whose one argument is the id, and builds
// the client. ok=false means the command is over and code is its exit code.
func (inv *invocation) startOn(args []string, idOf func(parsed) (string, int, bool)) (id string, c *client, code int, ok bool) {
	if _, id, code, ok = inv.startID(args, 1, idOf); !ok {
		return "", nil, code, false
	}
	c, code, ok = inv.newClient()
	return id, c, code, ok
}

// help writes the command's full usage.
func (inv *invocation) help(w io.Writer) {
	c := inv.cmd
	fmt.Fprintf(w, "usage: rlsched %s %s\n\n%s\n", c.name, c.args, c.summary)
	if c.details != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.details))
	}
	fmt.Fprintf(w, "\nflags:\n")
	type line struct{ left, usage string }
	var lines []line
	byValue := map[flag.Value][]string{}
	var names []string
	inv.fs.VisitAll(func(f *flag.Flag) {
		if _, isAlias := inv.fs.aliases[f.Name]; isAlias {
			canon := inv.fs.aliases[f.Name]
			byValue[inv.fs.Lookup(canon).Value] = append(byValue[inv.fs.Lookup(canon).Value], f.Name)
			return
		}
		names = append(names, f.Name)
	})
	sort.Strings(names)
	// --server last: it is on every command.
	for i, n := range names {
		if n == "server" {
			names = append(append(names[:i:i], names[i+1:]...), "server")
			break
		}
	}
	width := 0
	for _, n := range names {
		f := inv.fs.Lookup(n)
		valueName, usage := flag.UnquoteUsage(f)
		spell := []string{dashes(n)}
		for _, a := range byValue[f.Value] {
			spell = append([]string{dashes(a)}, spell...)
		}
		left := strings.Join(spell, ", ")
		if valueName != "" {
			left += " " + valueName
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "[]" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		lines = append(lines, line{left, usage})
		if len(left) > width {
			width = len(left)
		}
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l.left, l.usage)
	}
	if len(c.examples) > 0 {
		fmt.Fprintf(w, "\nexamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
