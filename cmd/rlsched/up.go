package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rlsched/rlsched/cli"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/internal/secure"
	"github.com/rlsched/rlsched/masterd"
	"github.com/rlsched/rlsched/worker"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/isolation"
)

// runUp starts a master and local workers in one process, on loopback, with
// the same code paths as a distributed deployment. It is the only place
// where secrets get defaults: generated once and kept in
// DATA_DIR/master/secrets.env (upLayout has the data dir's layout).
func runUp(ctx context.Context, args []string) error {
	var o masterFlags
	var wo workerOpts
	var workers int
	var gwo gatewayOpts
	f := newFlags("up")
	o.define(f, httpapi.RegistrationOpen)
	gwo.define(f, true)
	f.int(&workers, "workers", "RLSCHED_WORKERS", 1, "local workers to start")
	f.int(&wo.gpus, "gpus", "RLSCHED_GPUS", -1, "GPUs per local worker when nvidia-smi is absent (-1: detect)")
	f.int(&wo.slots, "slots", "RLSCHED_SLOTS", 2, "CPU slots per local worker")
	wo.defineIsolation(f)
	wo.defineOutputs(f)
	wo.defineResources(f, cgroup.BestEffort) // a laptop's `up` runs without delegation
	if err := f.parse(args); err != nil {
		return err
	}
	runAs, err := isolation.ResolveRunAs(wo.runAs)
	if err != nil {
		return err
	}
	if err := checkRunAsRegistration(runAs, o.cfg.Registration); err != nil {
		return err
	}
	log := newLogger()
	upDir := o.cfg.DataDir
	db := o.cfg.SQLitePath != "" || o.cfg.MySQLDSN != ""
	keep := map[string]bool{"logs": o.cfg.LogDir != "", "rlsched.db": db, "rlsched.db-wal": db, "rlsched.db-shm": db, "rlsched.db-journal": db}
	masterDir, workersDir, err := masterd.UpLayout(upDir, keep, log)
	if err != nil {
		return err
	}
	o.cfg.DataDir = masterDir
	secretsPath := filepath.Join(masterDir, "secrets.env")
	if err := masterd.TightenFile(secretsPath, log); err != nil {
		return err
	}
	secrets, err := loadOrCreateSecrets(secretsPath)
	if err != nil {
		return err
	}
	mc := o.config(log)
	mc.JWTSecret, mc.JoinToken = firstNonEmpty(os.Getenv("JWT_SECRET"), secrets["JWT_SECRET"]),
		firstNonEmpty(os.Getenv("WORKER_JOIN_TOKEN"), secrets["WORKER_JOIN_TOKEN"])
	mc.Gateway.SharedSecret = firstNonEmpty(os.Getenv("GATEWAY_SHARED_SECRET"), secrets["GATEWAY_SHARED_SECRET"])
	mc.Gateway.TrustHeaders = true
	if mc.PublicURL == "" { // the gateway's, once it listens: links need a name users open
		mc.PublicURL = upPublicURL(mc, gwo.port)
	}
	secure.ScrubEnv() // read: the local workers' guards and runs must not inherit them
	rm, err := masterd.Start(ctx, mc)
	if err != nil {
		return err
	}
	defer rm.Close(context.Background())
	gw, err := startGateway(ctx, gwo.upConfig(mc, rm.URL(), log))
	if err != nil {
		return err
	}
	defer gw.Close(context.Background())
	warnOpenBind(log, "the master's REST API", rm.URL(), mc.TLSProxy)
	warnOpenBind(log, "the gateway", gw.URL(), mc.TLSProxy)

	var ws []*worker.Worker
	defer func() { // all at once: each waits for its runs' grace
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() { w.Close(context.Background()) })
		}
		wg.Wait()
	}()
	// up as root on a machine whose python3 is a pyenv under /root: the
	// runs, under uids of their own, could run none of the tour's
	// commands. up is the operator here, so it configures the python they
	// get, said once here and in each such run's log (RUN_PYTHON), never
	// silently; a RUN_PYTHON given wins.
	if runAs != worker.RunAsNone && wo.runPython == "" {
		if first, fallback := isolation.UnreachablePython(os.Getenv("PATH")); fallback != "" {
			wo.runPython = fallback
			log.Warn().Str("python3", first).Str("RUN_PYTHON", fallback).
				Msg("runs under their own uids cannot execute the python3 on PATH; they run RUN_PYTHON instead, and their logs say so (set RUN_PYTHON to choose another)")
		}
	}
	for i := 0; i < workers; i++ {
		wo.masters = rm.RPCAddr()
		wo.id = fmt.Sprintf("local-%d", i)
		wo.dataDir = filepath.Join(workersDir, wo.id)
		cfg, err := workerConfig(wo, mc.JoinToken, log)
		if err != nil {
			return err
		}
		// A worker that cannot start (its data dir out of its runs' reach,
		// say) stops up: without its workers it would serve a queue that
		// never moves.
		w, err := worker.Start(ctx, cfg)
		if err != nil {
			return fmt.Errorf("local worker %s: %w", cfg.ID, err)
		}
		ws = append(ws, w)
	}
	// One URL for one install: the CLI beside `make run` defaults to the
	// gateway printed below, whatever ports up listens on.
	cliNote := "bin/rlsched uses URL by default"
	if path, forget, err := cli.RememberUp(gw.URL(), upDir); err != nil {
		log.Warn().Err(err).Msg("cannot record the URL for the CLI; give it --server URL")
		cliNote = "give bin/rlsched --server URL"
	} else {
		defer forget()
		cliNote += " (recorded in " + path + ")"
	}
	runsAs := "each run under a uid of its own (RUN_AS=" + runAs + ")"
	if runAs == worker.RunAsNone {
		runsAs = "NONE: runs share this process's uid, so every user's run can act as the scheduler here (read the secrets, change the database, kill other runs); start rlsched up as root to isolate runs"
	}
	fmt.Fprintf(os.Stdout, `
rlsched is up.
  URL:       %s
  master:    %s  (behind the gateway at URL)
  RPC:       %s  (workers join with WORKER_JOIN_TOKEN from the secrets file)
  data:      %s  (runs' outputs in workers/, the master's state in master/)
  database:  %s
  logs:      %s
  secrets:   %s  (generated; keep it private)
  isolation: %s
  CLI:       %s
  workers:   %d local, inside this process (up --workers N for more); a worker of its own, from another shell or machine:
             WORKER_JOIN_TOKEN_FILE=FILE bin/rlsched worker --master %s --data-dir DIR (rlsched up --help)

Try:  bin/rlsched register -u alice -p 'a-long-password'
      bin/rlsched login -u alice -p 'a-long-password'
      bin/rlsched submit --algorithm PPO --episodes 200 --wait
`, gw.URL(), rm.URL(), rm.RPCAddr(), upDir, rm.SQLitePath(), rm.LogDir(), secretsPath, runsAs, cliNote, workers, rm.RPCAddr())
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
		return nil
	case err := <-rm.Err():
		return fmt.Errorf("REST server stopped: %w", err)
	case err := <-gw.Err():
		return fmt.Errorf("gateway stopped: %w", err)
	}
}

// loadOrCreateSecrets reads KEY=VALUE lines, generating the missing secrets.
func loadOrCreateSecrets(path string) (map[string]string, error) {
	secrets := map[string]string{}
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && !strings.HasPrefix(k, "#") {
				secrets[k] = v
			}
		}
		f.Close()
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("cannot read secrets: %w", err)
	}
	changed := false
	for _, k := range []string{"JWT_SECRET", "WORKER_JOIN_TOKEN", "GATEWAY_SHARED_SECRET"} {
		if secrets[k] == "" {
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return nil, err
			}
			secrets[k], changed = hex.EncodeToString(b[:]), true
		}
	}
	if !changed {
		return secrets, nil
	}
	body := fmt.Sprintf("# generated by rlsched up; keep private\nJWT_SECRET=%s\nWORKER_JOIN_TOKEN=%s\nGATEWAY_SHARED_SECRET=%s\n",
		secrets["JWT_SECRET"], secrets["WORKER_JOIN_TOKEN"], secrets["GATEWAY_SHARED_SECRET"])
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		return nil, fmt.Errorf("cannot write secrets: %w", err)
	}
	return secrets, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkRunAsRegistration refuses RUN_AS=user beside open registration: a
// run under RUN_AS=user runs as the Unix account named like its owner, so
// anyone who could register the name of an existing account (a
// colleague's, a service's) would run code as it.
func checkRunAsRegistration(runAs, registration string) error {
	if runAs == worker.RunAsUser && (registration == "" || registration == httpapi.RegistrationOpen) {
		return usageError{errors.New("RUN_AS=user runs each run as the Unix account named like its owner, so with REGISTRATION=open " +
			"anyone could register an existing account's name and run as it: set REGISTRATION=closed (admins add users) or admin (an admin enables each account)")}
	}
	return nil
}
