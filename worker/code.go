package worker

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/codecache"
	"github.com/rlsched/rlsched/worker/isolation"
)

// A run's code snapshot (issue 27): before the run starts (held like a
// restore, execute), the worker brings the tree into its cache
// (worker/codecache) over the connection, as restored files come
// (outputs.Files.FetchCode), and makes the attempt's copy in the run's
// private dir: RLSCHED_CODE_DIR, its cwd (or the submitted subdir of it).
// Every attempt gets a fresh copy of the same tree, whichever worker runs
// it. A run without a snapshot runs in workdir (or its private dir).

// codeDirName is the copy's name in the run's private dir.
const codeDirName = "code"

// materialise makes r's copy of m's snapshot and finishes cmd there; a
// run without a snapshot is left as prepare made it. The failure is
// written into the run's log too, where its owner looks.
func (a *agent) materialise(r *run, m *pb.ExecuteTask, cmd *exec.Cmd) error {
	if m.GetCodeTree() == "" {
		return nil
	}
	err := a.materialiseTree(r, m, cmd)
	if err != nil {
		_, _ = fmt.Fprintf(r.out, "[rlsched] cannot start: %v\n", err)
	}
	return err
}

func (a *agent) materialiseTree(r *run, m *pb.ExecuteTask, cmd *exec.Cmd) error {
	began := time.Now()
	tree := m.GetCodeTree()
	t, err := a.code.Acquire(tree, r.outs)
	r.outs.EndCode()
	if err != nil {
		return fmt.Errorf("cannot fetch code snapshot %s: %w", tree, err)
	}
	defer a.code.Release(tree)
	fetched := time.Since(began)
	owner := codeOwner(r.ident)
	cp, err := a.code.Materialize(t, filepath.Join(r.dirs.Private, codeDirName), owner)
	if err != nil {
		return err
	}
	dir, err := codecache.Subdir(cp, m.GetCodeSubdir(), owner)
	if err != nil {
		return err
	}
	cmd.Env = append(cmd.Env, "RLSCHED_CODE_DIR="+cp.Dir)
	if err := a.resolve(r, m, cmd, dir); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(r.out, "[rlsched] code %s (%d files, %s)\n", tree, len(t.M.Files), humanSize(t.M.Size()))
	r.log.Info().Str("tree", tree).Int("files", len(t.M.Files)).Int("linked", cp.Linked).
		Dur("fetch", fetched).Dur("took", time.Since(began)).Msg("code snapshot ready")
	return nil
}

// codeOwner is who a run's copy belongs to: its uid, with hard links to
// the cache when that uid can neither write nor chmod the worker's files.
func codeOwner(id *isolation.Identity) *codecache.Owner {
	if id == nil {
		return nil // the worker's own uid: copies, which it owns already
	}
	uid := int(id.UID())
	return &codecache.Owner{UID: uid, GID: int(id.GID()), Link: uid != 0 && uid != os.Geteuid()}
}

// resolve checks that the run's uid can enter dir and read the built-in
// scripts it names, makes dir its working directory, and looks argv[0] up
// in its PATH as that uid would (lookPath), unless its Python env is still
// to be built: buildEnv looks it up on the env's PATH then. A run in an
// image is looked up in the image, by its runtime (containerize).
func (a *agent) resolve(r *run, m *pb.ExecuteTask, cmd *exec.Cmd, dir string) error {
	if err := isolation.CheckReach(r.ident, dir, r.scriptArgs); err != nil {
		return err
	}
	cmd.Dir = dir
	if m.GetImage() != "" {
		return a.containerize(r, m, cmd, dir)
	}
	if r.py.toBuild() {
		return nil
	}
	path, err := a.lookPath(r, cmd.Args[0], envValue(cmd.Env, "PATH"), dir)
	if err != nil {
		return err
	}
	cmd.Path = path
	return nil
}

// humanSize is n bytes for a log line: 12.3 MiB.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
