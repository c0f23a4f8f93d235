package isolation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/secure"
)

// Whose uid a run gets (Config.RunAs, RUN_AS).
const (
	// RunAsDynamic: a uid of Config.RunUIDs that no other live run holds,
	// with the same number as its gid. The default for a worker run as root.
	RunAsDynamic = "dynamic"
	// RunAsUser: the Unix account named like the run's rlsched user, which
	// must exist on the worker (uid ≥ minUserUID).
	RunAsUser = "user"
	// RunAsNone: the worker's own uid, as before issue 12. The default, and
	// the only choice, for a worker not run as root.
	RunAsNone = "none"
)

const (
	// minUserUID: RUN_AS=user never runs as root or a system account;
	// nor as nobody, whose uid unrelated daemons and NFS share.
	minUserUID = 1000
	nobodyUID  = 65534
	// DefaultUIDLockDir holds the lock files of the uids in use on this machine.
	DefaultUIDLockDir = "/run/rlsched/uids"
	// uidKillTimeout bounds how long the end of a run waits for the
	// processes of its uid that left its group to die.
	uidKillTimeout = 10 * time.Second
)

// Isolator starts each run under the uid its mode (RUN_AS) names, with a
// private directory of its own. Its methods are safe for concurrent use.
type Isolator struct {
	mode    string
	uids    *uidPool // RunAsDynamic only
	log     zerolog.Logger
	own     struct{ uid, gid int }
	dataDir string
	outputs string // DataDir/outputs
	private string // DataDir/private
	scripts string // DataDir/scripts
}

// Identity is who one run runs as; nil for RunAsNone.
type Identity struct {
	uid, gid uint32
	name     string    // the Unix account (RunAsUser); "" for a dynamic uid
	home     string    // the account's home (RunAsUser)
	lease    *UIDLease // RunAsDynamic: the uid's lock, held until its processes are gone
}

// UID and GID are the run's.
func (id *Identity) UID() uint32 { return id.uid }
func (id *Identity) GID() uint32 { return id.gid }

// DynamicUID is the uid the guard may kill every process of for a run of
// identity id: its dynamic uid, which no one else has while it runs; 0 (the
// group alone) for a RUN_AS=user account or the worker's own uid.
func (id *Identity) DynamicUID() uint32 {
	if id == nil || id.lease == nil {
		return 0
	}
	return id.uid
}

func (id *Identity) String() string {
	if id.name != "" {
		return fmt.Sprintf("uid %d (%s)", id.uid, id.name)
	}
	return fmt.Sprintf("uid %d", id.uid)
}

// credential is the run's SysProcAttr.Credential: its uid and gid and no
// supplementary groups (Groups empty with NoSetGroups false clears them),
// so it gets none of the worker's groups nor the account's.
func (id *Identity) Credential() *syscall.Credential {
	if id == nil {
		return nil
	}
	return &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
}

// ResolveRunAs picks the default mode and refuses a mode this worker cannot
// provide.
func ResolveRunAs(mode string) (string, error) {
	root := os.Geteuid() == 0
	switch mode {
	case "":
		if root && runtime.GOOS == "linux" {
			return RunAsDynamic, nil
		}
		return RunAsNone, nil
	case RunAsDynamic, RunAsUser:
		if runtime.GOOS != "linux" {
			return "", fmt.Errorf("cannot start worker: RUN_AS=%s needs Linux; set RUN_AS=none", mode)
		}
		if !root {
			return "", fmt.Errorf("cannot start worker: RUN_AS=%s starts runs under other uids, which needs a worker running as root (it runs as uid %d); run it as root, or set RUN_AS=none", mode, os.Geteuid())
		}
		return mode, nil
	case RunAsNone:
		return mode, nil
	}
	return "", fmt.Errorf("cannot start worker: RUN_AS=%q: want dynamic, user or none", mode)
}

// Options are what an Isolator needs of the worker's Config.
type Options struct {
	RunAs      string   // RunAsDynamic, RunAsUser or RunAsNone, resolved (ResolveRunAs)
	RunUIDs    UIDRange // RunAsDynamic's uids
	UIDLockDir string   // RunAsDynamic's lock files
	DataDir    string
	Runs       int // how many runs the worker may hold at once
}

// New prepares the data dir's layout for cfg.RunAs (see
// prepareDataDir) and, for RunAsDynamic, the uid pool. It logs a warning
// when runs share the worker's uid.
func New(cfg Options, log zerolog.Logger) (*Isolator, error) {
	iso := &Isolator{mode: cfg.RunAs, log: log, dataDir: cfg.DataDir,
		outputs: filepath.Join(cfg.DataDir, "outputs"), private: filepath.Join(cfg.DataDir, "private"),
		scripts: filepath.Join(cfg.DataDir, "scripts")}
	iso.own.uid, iso.own.gid = os.Geteuid(), os.Getegid()
	if iso.mode == RunAsDynamic {
		var err error
		if iso.uids, err = newUIDPool(cfg.RunUIDs, cfg.UIDLockDir, log); err != nil {
			return nil, fmt.Errorf("cannot start worker: %w", err)
		}
	}
	if err := iso.prepareDataDir(); err != nil {
		return nil, err
	}
	switch iso.mode {
	case RunAsNone:
		log.Warn().Int("uid", iso.own.uid).Msg("runs share the worker's uid (isolation: none): a run can signal and ptrace the other runs, " +
			"kill the worker, and read the worker's files (its join token file, spool, data dir); run the worker as root so that each run gets a uid of its own (RUN_AS)")
	case RunAsDynamic:
		// Every dynamic uid is in the "other" class of the data dir's
		// ancestors: check once that such a uid reaches the run-facing tree.
		probe := cfg.RunUIDs.First
		for _, p := range []string{iso.outputs, iso.private, iso.scripts} {
			if err := canAccess(p, probe, probe, needSearch); err != nil {
				return nil, fmt.Errorf("cannot start worker: runs under their own uids (RUN_AS=dynamic) cannot reach %s: %w; "+
					"put the data dir under directories every user may enter (chmod o+x on each, or a data dir such as /var/lib/rlsched-worker), or set RUN_AS=none",
					p, err)
			}
		}
		if need := cfg.Runs; cfg.RunUIDs.size() < need {
			log.Warn().Str("range", cfg.RunUIDs.String()).Int("runs", need).
				Msg("RUN_UID_RANGE holds fewer uids than this worker may run at once; runs beyond it fail to start")
		}
		log.Info().Str("run_as", iso.mode).Str("uid_range", cfg.RunUIDs.String()).Msg("each run gets a uid of its own")
	case RunAsUser:
		// Only the master knows who may register: it refuses this worker
		// where anyone may (dispatch, onHello), and this says why first.
		log.Warn().Str("run_as", iso.mode).Msg("each run runs as the Unix account named like its rlsched user: " +
			"a master with REGISTRATION=open refuses this worker, since anyone could register an existing account's name and run as it; " +
			"its master must have REGISTRATION=closed or admin")
	}
	return iso, nil
}

// UIDLockDir is the uid lock directory of RunAsDynamic; "" in the other
// modes.
func (iso *Isolator) UIDLockDir() string {
	if iso.uids == nil {
		return ""
	}
	return iso.uids.dir
}

// HelloIsolation is Hello.isolation (core.Isolation*).
func (iso *Isolator) HelloIsolation() string {
	switch iso.mode {
	case RunAsNone:
		return core.IsolationNone
	case RunAsUser:
		return core.IsolationUser
	}
	return core.IsolationUID
}

// prepareDataDir gives the data dir its layout, fixing the modes of what an
// earlier version left:
//
//	DataDir/            0711  the worker's; runs may pass, not list
//	  spool/            0700  unacked output (worker/spool), never a run's
//	  scripts/          0755  the built-in scripts, readable, not writable, by runs
//	  outputs/          0711
//	    <task>/         0711
//	      <attempt>/    0700  the run's output dir, owned by its uid while it runs
//	  private/          0711
//	    <task>.<attempt>/ 0700  the run's HOME (a uid of its own) and TMPDIR, never uploaded
//
// What an earlier worker left in private/ is removed: its runs are gone.
func (iso *Isolator) prepareDataDir() error {
	for _, d := range []struct {
		path string
		perm fs.FileMode
	}{{iso.dataDir, 0o711}, {iso.outputs, 0o711}, {iso.private, 0o711}, {iso.scripts, 0o755}} {
		changed, err := secure.EnsureDir(d.path, d.perm)
		if err != nil {
			return fmt.Errorf("cannot start worker: %w", err)
		}
		if changed != "" {
			iso.log.Info().Str("change", changed).Msg("set the mode of a worker directory")
		}
	}
	if left, err := os.ReadDir(iso.private); err == nil {
		for _, e := range left {
			p := filepath.Join(iso.private, e.Name())
			if err := os.RemoveAll(p); err != nil {
				iso.log.Warn().Err(err).Str("dir", p).Msg("cannot remove the private dir an earlier run left")
			}
		}
	}
	return iso.tightenOutputs()
}

// tightenOutputs closes the output dirs of earlier runs: task dirs become
// 0711, attempt dirs lose every bit for others, and an attempt dir still
// owned by a dynamic uid (its worker died before giving it back) returns to
// the worker. What it cannot fix it logs: the run dirs of new runs are made
// right one by one anyway.
func (iso *Isolator) tightenOutputs() error {
	tasks, err := os.ReadDir(iso.outputs)
	if err != nil {
		return fmt.Errorf("cannot start worker: cannot list %s: %w", iso.outputs, err)
	}
	warn := func(p string, err error) {
		iso.log.Warn().Err(err).Str("dir", p).Msg("cannot close the output dir of an earlier run to other uids")
	}
	for _, t := range tasks {
		if !t.IsDir() {
			continue
		}
		taskDir := filepath.Join(iso.outputs, t.Name())
		if err := os.Chmod(taskDir, 0o711); err != nil {
			warn(taskDir, err)
			continue
		}
		attempts, err := os.ReadDir(taskDir)
		if err != nil {
			warn(taskDir, err)
			continue
		}
		for _, a := range attempts {
			if !a.IsDir() { // a symlink is no directory here: never followed
				continue
			}
			p := filepath.Join(taskDir, a.Name())
			st, err := os.Lstat(p)
			if err != nil {
				continue
			}
			if st.Mode().Perm()&0o077 != 0 {
				if err := os.Chmod(p, st.Mode().Perm()&0o700); err != nil {
					warn(p, err)
				}
			}
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && iso.uids != nil && sys.Uid >= iso.uids.r.First && sys.Uid <= iso.uids.r.Last {
				if err := os.Lchown(p, iso.own.uid, iso.own.gid); err != nil {
					warn(p, err)
				}
			}
		}
	}
	return nil
}

// Acquire picks the identity of the run m names: nil for RunAsNone.
func (iso *Isolator) Acquire(m *pb.ExecuteTask) (*Identity, error) {
	switch iso.mode {
	case RunAsDynamic:
		l, err := iso.uids.acquire()
		if err != nil {
			return nil, err
		}
		return &Identity{uid: l.uid, gid: l.uid, lease: l}, nil
	case RunAsUser:
		return lookupRunUser(m.GetUser())
	}
	return nil, nil
}

// lookupRunUser is RunAsUser's identity for the rlsched user name.
func lookupRunUser(name string) (*Identity, error) {
	if name == "" {
		return nil, errors.New("RUN_AS=user, but the master named no owner for this run (ExecuteTask.user): upgrade the master, or set RUN_AS=dynamic")
	}
	if !core.ValidUsername(name) {
		return nil, fmt.Errorf("RUN_AS=user: invalid user name %q", name)
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return nil, fmt.Errorf("RUN_AS=user runs each run as the Unix account named like its rlsched user, and this worker has no account %q: create it (useradd %s), or set RUN_AS=dynamic", name, name)
		}
		return nil, fmt.Errorf("cannot look up the Unix account %q: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("the Unix account %q has uid %q gid %q, not numbers", name, u.Uid, u.Gid)
	}
	if uid < minUserUID || uid == nobodyUID {
		return nil, fmt.Errorf("the Unix account %q has uid %d: RUN_AS=user runs only as regular accounts (uid ≥ %d), never as root, nobody or a system account", name, uid, minUserUID)
	}
	return &Identity{uid: uint32(uid), gid: uint32(gid), name: u.Username, home: u.HomeDir}, nil
}

// RunDirs are a run's two directories: Out, DataDir/outputs/<task>/<attempt>,
// whose every file is uploaded (RLSCHED_OUTPUT_DIR), and Private,
// DataDir/private/<task>.<attempt>, its working directory, TMPDIR and (under a
// dynamic uid) HOME, never uploaded and removed at its end (Release): what
// tools write for themselves (credentials in ~/.netrc, a token cache) must
// never become an artifact another user can read.
// In is RLSCHED_INPUT_DIR, for a run with parents (issue 29): the outputs
// of the runs it names in inputsFrom are restored there, never uploaded;
// "" for a run without parents.
type RunDirs struct{ Out, Private, In string }

// MakeRunDirs creates the run's dirs (mode 0700), owned by id's uid when it
// has one.
func (iso *Isolator) MakeRunDirs(m *pb.ExecuteTask, id *Identity) (RunDirs, error) {
	taskDir := filepath.Join(iso.outputs, m.GetTaskId())
	if err := os.Mkdir(taskDir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return RunDirs{}, fmt.Errorf("cannot create output dir: %w", err)
	}
	if err := os.Chmod(taskDir, 0o711); err != nil {
		return RunDirs{}, fmt.Errorf("cannot create output dir: %w", err)
	}
	attempt := strconv.Itoa(int(m.GetAttempt()))
	d := RunDirs{Out: filepath.Join(taskDir, attempt), Private: filepath.Join(iso.private, m.GetTaskId()+"."+attempt)}
	dirs := []string{d.Out, d.Private}
	if len(m.GetParents()) > 0 {
		d.In = filepath.Join(taskDir, attempt+".in")
		dirs = append(dirs, d.In)
	}
	for _, dir := range dirs {
		if err := iso.makePrivate(dir, id); err != nil {
			return d, err
		}
	}
	return d, nil
}

// makePrivate makes dir a directory of mode 0700 owned by id's uid.
func (iso *Isolator) makePrivate(dir string, id *Identity) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cannot create the run's dir: %w", err)
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("cannot create the run's dir: %s is not a directory", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the run's dir: %w", err)
	}
	if id != nil {
		if err := os.Lchown(dir, int(id.uid), int(id.gid)); err != nil {
			return fmt.Errorf("cannot give the run's dir %s to %s: %w", dir, id, err)
		}
	}
	return nil
}

// CheckReach fails a run under its own uid that could not enter its working
// directory or read a built-in script it names, with the reason.
func CheckReach(id *Identity, dir string, scriptArgs []string) error {
	if id == nil {
		return nil
	}
	if err := canAccess(dir, id.uid, id.gid, needSearch); err != nil {
		// A home directory is the usual case: the fix is a snapshot of the
		// code (which the run's uid owns) or the submitter's own uid, not
		// turning the isolation off.
		return fmt.Errorf("workdir %s cannot be entered by %s: %w; submit the code as a snapshot (rlsched submit without --no-code or --workdir), use a directory every user may enter, or have the worker run runs as their submitter's account (RUN_AS=user)", dir, id, err)
	}
	for _, p := range scriptArgs {
		if err := canAccess(p, id.uid, id.gid, needRead); err != nil {
			return fmt.Errorf("the built-in script %s cannot be read by %s: %w", p, id, err)
		}
	}
	return nil
}

// CheckRead says why the run of identity id cannot read path (a file it
// names, such as its requirements file), or nil; nil for the worker's own.
func CheckRead(id *Identity, path string) error {
	if id == nil {
		return nil
	}
	if err := canAccess(path, id.uid, id.gid, needRead); err != nil {
		return fmt.Errorf("%s cannot read it: %w", id, err)
	}
	return nil
}

// IdentityEnv is what a run gets instead of the worker's TMPDIR and, under
// a uid of its own, HOME, USER and LOGNAME: TMPDIR is the run's private dir;
// a dynamic uid's HOME is too, an account's (RUN_AS=user) its own home, and a
// run under the worker's uid keeps the worker's (its user's packages, as
// pip --user put them, are where they were). The worker's XDG_* directories
// belong to the worker's user and are dropped (filtered by DropIdentityEnv).
func IdentityEnv(id *Identity, privDir string) []string {
	if id == nil {
		return []string{"TMPDIR=" + privDir}
	}
	home, name := privDir, fmt.Sprintf("rlsched-%d", id.uid)
	if id.name != "" {
		home, name = id.home, id.name
	}
	return []string{"HOME=" + home, "TMPDIR=" + privDir, "USER=" + name, "LOGNAME=" + name}
}

// DropIdentityEnv reports an inherited variable that describes the worker's
// own user, which a run under another uid must not inherit.
func DropIdentityEnv(id *Identity, key string) bool {
	return id != nil && strings.HasPrefix(key, "XDG_")
}

// Sweep kills what is left of a dynamic uid once its run's leader exited:
// processes that left the run's group (setsid) are found by their uid.
// log is the run's.
func (iso *Isolator) Sweep(id *Identity, log zerolog.Logger) {
	if id == nil || id.lease == nil {
		return
	}
	killed, left, err := KillUID(id.uid, uidKillTimeout)
	switch {
	case err != nil:
		log.Error().Err(err).Uint32("uid", id.uid).Msg("cannot look for the run's processes by uid")
	case left > 0:
		log.Error().Uint32("uid", id.uid).Int("left", left).
			Msg("processes of the run's uid outlived SIGKILL; the uid is not given to another run while they live")
	case killed > 0:
		log.Info().Uint32("uid", id.uid).Int("killed", killed).Msg("killed processes of the run's uid that had left its group")
	}
}

// Release gives back what Acquire and MakeRunDirs took: the run's private
// dir is removed (os.RemoveAll follows no link the run left), a dynamic
// uid's output and input dirs return to the worker (a later run under the same uid
// must not reach it) and what it left in shared places is removed
// (RemoveLeftovers), then the uid is freed. A zero RunDirs field was never
// made. Call it once the run's processes are gone (or never started). log
// is the run's.
func (iso *Isolator) Release(id *Identity, d RunDirs, log zerolog.Logger) {
	if d.Private != "" {
		if err := os.RemoveAll(d.Private); err != nil {
			log.Warn().Err(err).Str("dir", d.Private).Msg("cannot remove the run's private dir")
		}
	}
	if id == nil || id.lease == nil {
		return
	}
	// Its input dir too: its path is known to whoever knows the run's id,
	// and the dirs above it only stop a listing. And both before
	// RemoveLeftovers, which then never enters them (a data dir may be
	// under /tmp).
	for _, dir := range []string{d.Out, d.In} {
		if dir == "" {
			continue
		}
		if err := os.Lchown(dir, iso.own.uid, iso.own.gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Error().Err(err).Str("dir", dir).Msg("cannot take the run's dir back from its uid; keeping the uid")
			return // never hand out a uid that still owns a finished run's files
		}
	}
	// What it left in /tmp, /dev/shm and SysV IPC would be the next run's
	// of this uid. What cannot be removed is logged, and the uid freed all
	// the same: a root that cannot unlink in /tmp has bigger trouble than
	// one uid, and a uid kept back would shrink the pool for good.
	if n, err := RemoveLeftovers(id.uid); err != nil {
		log.Error().Err(err).Uint32("uid", id.uid).Int("removed", n).Msg("cannot remove everything the run's uid left in the shared temporary dirs and SysV IPC")
	} else if n > 0 {
		log.Info().Uint32("uid", id.uid).Int("removed", n).Msg("removed what the run's uid left in the shared temporary dirs and SysV IPC")
	}
	id.lease.Release()
}
