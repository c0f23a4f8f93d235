package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/worker"
)

type workerOpts struct {
	masters, id, dataDir string
	gpus, slots          int
}

func (o *workerOpts) define(f envFlags) {
	f.str(&o.masters, "master", "RLSCHED_MASTER", "127.0.0.1:9000", "master RPC addresses, host:port[,host:port...] tried in order")
	f.str(&o.id, "id", "RLSCHED_WORKER_ID", "", "worker id (default: the host name and a short id kept in --data-dir)")
	f.str(&o.dataDir, "data-dir", "RLSCHED_WORKER_DIR", filepath.Join(defaultDataDir(), "worker"),
		"directory for run outputs and the worker's identity; one per worker")
	f.int(&o.gpus, "gpus", "RLSCHED_GPUS", -1, "GPUs to offer when nvidia-smi is absent (-1: detect)")
	f.int(&o.slots, "slots", "RLSCHED_SLOTS", runtime.NumCPU(), "CPU slots for runs that need no GPU")
}

// workerConfig resolves GPUs (nvidia-smi first, then --gpus); an empty id
// is left to the worker, which derives it from its data dir.
func workerConfig(o workerOpts, token string, log zerolog.Logger) (worker.Config, error) {
	if token == "" {
		return worker.Config{}, errors.New("WORKER_JOIN_TOKEN is not set: use the master's join token")
	}
	host, _ := os.Hostname()
	gpus, err := worker.DetectGPUs()
	if err != nil {
		log.Warn().Err(err).Msg("nvidia-smi failed; using --gpus")
	}
	if len(gpus) == 0 && o.gpus > 0 {
		gpus = worker.SyntheticGPUs(o.gpus)
	}
	var masters []string
	for _, m := range strings.Split(o.masters, ",") {
		if m = strings.TrimSpace(m); m != "" {
			masters = append(masters, m)
		}
	}
	if len(masters) == 0 {
		return worker.Config{}, usageError{errors.New("--master is empty")}
	}
	return worker.Config{ID: o.id, Masters: masters, JoinToken: token, Host: host, DataDir: o.dataDir,
		GPUs: gpus, Slots: o.slots, Logger: log}, nil
}

func runWorker(ctx context.Context, args []string) error {
	var o workerOpts
	f := newFlags("worker")
	o.define(f)
	if err := f.parse(args); err != nil {
		return err
	}
	log := newLogger()
	cfg, err := workerConfig(o, os.Getenv("WORKER_JOIN_TOKEN"), log)
	if err != nil {
		return err
	}
	return worker.Run(ctx, cfg)
}
