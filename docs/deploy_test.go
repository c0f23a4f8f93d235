// Package docs holds the tests that keep the documents of this folder true
// to the code: deploy.md's units, environment files, flags and Prometheus
// configuration are checked against the rlsched binary, systemd-analyze
// and promtool. It has no code of its own.
package docs

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/promcheck"
	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// notBuilt are the settings deploy.md names as not built yet (marked with
// their issue). When one is built, the test says so: drop the mark.
var notBuilt = map[string]string{}

// notSettings are names deploy.md writes like settings that are none: what
// a run's environment gets, and the kernel's names.
var notSettings = map[string]bool{
	"CUDA_VISIBLE_DEVICES": true, "XDG_CACHE_HOME": true, "PIP_CACHE_DIR": true, "HF_HOME": true, "TORCH_HOME": true,
	"CLONE_INTO_CGROUP": true, "CAP_BPF": true, "CAP_SYS_ADMIN": true, "CAP_SYS_RESOURCE": true,
	// pip's own, which the worker passes to the Python envs it builds.
	"PIP_INDEX_URL": true, "PIP_EXTRA_INDEX_URL": true, "PIP_FIND_LINKS": true, "PIP_NO_INDEX": true,
}

// secretNames must come from an EnvironmentFile or a token file, never a
// unit's Environment= or a command line.
var secretNames = []string{"JWT_SECRET", "WORKER_JOIN_TOKEN", "WORKER_KEY", "GATEWAY_SHARED_SECRET", "NACOS_PASSWORD", "MYSQL_DSN", "ARTIFACT_S3_SECRET_KEY"}

// block is a fenced code block of deploy.md; path is the file it shows
// when its first line is a comment naming one ("# /etc/...").
type block struct {
	lang, path string
	lines      []string
}

func readBlocks(t *testing.T) (string, []block) {
	t.Helper()
	b, err := os.ReadFile("deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur *block
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimPrefix(line, "```")}
		case cur != nil && line == "```":
			if len(cur.lines) > 0 && strings.HasPrefix(cur.lines[0], "# /") {
				cur.path = strings.Fields(cur.lines[0])[1]
			}
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	if cur != nil {
		t.Fatal("deploy.md: a code block is not closed")
	}
	return string(b), blocks
}

// cli runs the binary's help once per subcommand.
type cli struct {
	bin  string
	mu   sync.Mutex
	help map[string]string
	src  string // cmd/rlsched's source, for the variables read with os.Getenv alone
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	bin, cleanup, err := rig.Build("docs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	var src strings.Builder
	files, _ := filepath.Glob("../cmd/rlsched/*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	return &cli{bin: bin, help: map[string]string{}, src: src.String()}
}

func (c *cli) helpOf(t *testing.T, sub string) string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.help[sub]; ok {
		return h
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, c.bin, append(strings.Fields(sub), "--help")...).CombinedOutput() // --help exits non-zero
	if !strings.Contains(string(out), "-") {
		t.Fatalf("rlsched %s --help printed no flags:\n%s", sub, out)
	}
	c.help[sub] = string(out)
	return string(out)
}

// hasFlag reports whether sub's help lists --name.
func (c *cli) hasFlag(t *testing.T, sub, name string) bool {
	re := regexp.MustCompile(`(?m)(^|[\s,])--?` + regexp.QuoteMeta(name) + `([\s,=]|$)`)
	return re.MatchString(c.helpOf(t, sub))
}

// knowsEnv reports whether sub reads the variable: named in its help, or
// read by cmd/rlsched (the secrets, which have no flag).
func (c *cli) knowsEnv(t *testing.T, sub, name string) bool {
	if sub != "" && strings.Contains(c.helpOf(t, sub), "(env "+name+")") {
		return true
	}
	return strings.Contains(c.src, `"`+name+`"`)
}

var (
	// An rlsched command line: the subcommand and what follows.
	commandRe = regexp.MustCompile(`(?:^|[\s(;&|=])(?:/usr/local/bin/|bin/)?rlsched\s+([a-z]+)((?:\s+[^\s|;&)]+)*)`)
	flagRe    = regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	// A setting in backticks: upper case with an underscore.
	settingRe = regexp.MustCompile("`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?:=[^`]*)?`")
	envKeyRe  = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`)
	// Fenced blocks, and inline code of the text once they are gone.
	fencedRe     = regexp.MustCompile("(?ms)^```.*?^```$")
	inlineCodeRe = regexp.MustCompile("`([^`\n]+)`")
)

var subcommands = []string{"up", "master", "worker", "gateway", "user", "register", "login", "logout",
	"submit", "ls", "show", "logs", "metrics", "cancel", "rerun", "workers", "whoami"}

// TestDeployNamesExist: every flag on an rlsched command line of
// deploy.md is a flag of that subcommand, every setting named is read by
// the binary (or marked not built yet), and no secret sits on a command
// line or in a unit's Environment=.
func TestDeployNamesExist(t *testing.T) {
	doc, blocks := readBlocks(t)
	c := newCLI(t)

	// Command lines: in code blocks and in inline code of the text.
	var commandLines []string
	for _, b := range blocks {
		commandLines = append(commandLines, b.lines...)
	}
	for _, m := range inlineCodeRe.FindAllStringSubmatch(fencedRe.ReplaceAllString(doc, ""), -1) {
		commandLines = append(commandLines, m[1])
	}
	for _, line := range commandLines {
		for _, m := range commandRe.FindAllStringSubmatch(line, -1) {
			sub := m[1]
			if !slices.Contains(subcommands, sub) {
				t.Errorf("deploy.md: `rlsched %s` is no subcommand (in %q)", sub, line)
				continue
			}
			args, _, _ := strings.Cut(m[2]+" ", " -- ") // what follows -- is the run's argv
			if sub == "user" && strings.HasPrefix(strings.TrimSpace(args), "add ") {
				sub = "user add" // the store's own command, apart from the REST ones
			}
			for _, f := range flagRe.FindAllStringSubmatch(args, -1) {
				if !c.hasFlag(t, sub, f[1]) {
					t.Errorf("deploy.md: rlsched %s has no flag --%s (in %q)", sub, f[1], line)
				}
			}
			for _, s := range secretNames {
				if strings.Contains(m[2], s+"=") {
					t.Errorf("deploy.md: %s on a command line (in %q)", s, line)
				}
			}
		}
	}

	// Environment files and units: each variable is one its service reads.
	for _, b := range blocks {
		sub := serviceOf(b.path)
		if sub == "" {
			continue
		}
		for _, line := range b.lines {
			var names []string
			if k := envKeyRe.FindStringSubmatch(line); k != nil && strings.HasSuffix(b.path, ".env") {
				names = append(names, k[1])
			}
			if env, ok := strings.CutPrefix(line, "Environment="); ok {
				for _, kv := range strings.Fields(env) {
					name, _, _ := strings.Cut(kv, "=")
					names = append(names, name)
					if slices.Contains(secretNames, name) {
						t.Errorf("%s: %s in Environment=: put it in the EnvironmentFile (mode 0600)", b.path, name)
					}
				}
			}
			for _, n := range names {
				if !c.knowsEnv(t, sub, n) {
					t.Errorf("%s: rlsched %s does not read %s", b.path, sub, n)
				}
			}
		}
	}

	// Settings named in the text.
	seen := map[string]bool{}
	for _, m := range settingRe.FindAllStringSubmatch(doc, -1) {
		name := m[1]
		if seen[name] || notSettings[name] {
			continue
		}
		seen[name] = true
		known := c.knowsEnv(t, "", name)
		for _, sub := range []string{"master", "worker", "gateway"} {
			known = known || c.knowsEnv(t, sub, name)
		}
		issue, marked := notBuilt[name]
		switch {
		case known && marked:
			t.Errorf("deploy.md: %s is built now: drop its %q mark there and in notBuilt", name, issue)
		case !known && !marked:
			t.Errorf("deploy.md: %s is read by no rlsched command (a typo, or mark it not built yet)", name)
		case marked && !strings.Contains(doc, "("+issue+")"):
			t.Errorf("deploy.md: %s is not built yet but no %q mark says so", name, issue)
		}
	}
}

// serviceOf maps a unit or environment file of deploy.md to the
// subcommand it configures ("" for other files).
func serviceOf(path string) string {
	base := filepath.Base(path)
	for _, sub := range []string{"master", "worker", "gateway"} {
		if base == "rlsched-"+sub+".service" || base == sub+".env" {
			return sub
		}
	}
	return ""
}

// TestDeployUnitsVerify runs systemd-analyze verify on every unit of
// deploy.md, with ExecStart pointing at the binary under test, and fails
// on any complaint (an unknown key, a bad value, a missing binary).
func TestDeployUnitsVerify(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found (Debian's systemd package ships it)")
	}
	_, blocks := readBlocks(t)
	c := newCLI(t)
	dir := t.TempDir()
	var units []string
	for _, b := range blocks {
		if !strings.HasSuffix(b.path, ".service") {
			continue
		}
		text := strings.ReplaceAll(strings.Join(b.lines, "\n")+"\n", "/usr/local/bin/rlsched", c.bin)
		f := filepath.Join(dir, filepath.Base(b.path))
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, f)
	}
	if len(units) != 3 {
		t.Fatalf("deploy.md shows %d units, want master, gateway and worker", len(units))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, append([]string{"verify"}, units...)...).CombinedOutput()
	var complaints []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		// The units' After= and Wants= name services of the target
		// machines (mariadb, nvidia-persistenced) that this one lacks.
		if l != "" && !strings.Contains(l, "not found") {
			complaints = append(complaints, l)
		}
	}
	if err != nil || len(complaints) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, strings.Join(complaints, "\n"))
	}
}

// TestDeployPrometheusConfig runs promtool check config on deploy.md's
// prometheus.yml.
func TestDeployPrometheusConfig(t *testing.T) {
	tool := promcheck.Promtool(t)
	_, blocks := readBlocks(t)
	for _, b := range blocks {
		if filepath.Base(b.path) != "prometheus.yml" {
			continue
		}
		f := filepath.Join(t.TempDir(), "prometheus.yml")
		if err := os.WriteFile(f, []byte(strings.Join(b.lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "check", "config", f).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool check config: %v\n%s", err, out)
		}
		return
	}
	t.Fatal("deploy.md shows no prometheus.yml")
}
