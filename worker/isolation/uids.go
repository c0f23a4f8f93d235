package isolation

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/secure"
)

// UIDRange is an inclusive range of uids that RUN_AS=dynamic hands to runs.
type UIDRange struct{ First, Last uint32 }

// DefaultUIDRange is RUN_UID_RANGE's default: above the accounts distributions
// create (up to 60000 by login.defs) and below nobody (65534).
var DefaultUIDRange = UIDRange{First: 61000, Last: 61999}

// ParseUIDRange reads "FIRST-LAST" (inclusive, FIRST ≥ 1).
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Errorf("invalid uid range %q: want FIRST-LAST, e.g. 61000-61999", s)
	}
	r := UIDRange{First: uint32(first), Last: uint32(last)}
	return r, r.Validate()
}

func (r UIDRange) Validate() error {
	switch {
	case r.First == 0:
		return fmt.Errorf("uid range %s holds uid 0: runs never run as root", r)
	case r.First > r.Last:
		return fmt.Errorf("uid range %s is empty: FIRST must not exceed LAST", r)
	case r.Last >= 1<<31:
		return fmt.Errorf("uid range %s goes past 2147483647", r)
	}
	return nil
}

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

func (r UIDRange) size() int { return int(r.Last-r.First) + 1 }

// uidPool hands out the uids of a range, one per live run. A uid is given to
// a run only while this process holds an exclusive flock on its lock file in
// dir, so that no two runs of any worker on the machine (that shares dir)
// hold it at once; the kernel drops the lock when the worker dies. A uid is
// skipped while an account or group has its number, and while any process
// still runs under it (a run of a worker that died, or one that could not be
// killed yet).
//
// acquire and release are safe for concurrent use.
type uidPool struct {
	r   UIDRange
	dir string
	log zerolog.Logger

	mu     sync.Mutex
	next   uint32          // offset in r of the next uid to try: uids are reused as late as possible
	warned map[uint32]bool // uids skipped for live processes, logged once
}

// UIDLease is one uid held for one run; release it once no process of the
// uid is left.
type UIDLease struct {
	uid  uint32
	lock *os.File
}

func newUIDPool(r UIDRange, dir string, log zerolog.Logger) (*uidPool, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if err := uidsMapped(r); err != nil {
		return nil, err
	}
	if _, err := secure.EnsureDir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot prepare the uid lock directory: %w", err)
	}
	return &uidPool{r: r, dir: dir, log: log, warned: map[uint32]bool{}}, nil
}

// acquire takes the next free uid of the range.
func (p *uidPool) acquire() (*UIDLease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := uint32(p.r.size())
	for i := uint32(0); i < n; i++ {
		off := (p.next + i) % n
		uid := p.r.First + off
		if accountUses(uid) {
			continue
		}
		l, err := LockUID(p.dir, uid)
		if err != nil {
			return nil, err
		}
		if l == nil {
			continue // another run holds it
		}
		if pids, err := UIDProcesses(uid); err != nil || len(pids) > 0 {
			if !p.warned[uid] {
				p.warned[uid] = true
				p.log.Warn().Uint32("uid", uid).Ints("pids", pids).AnErr("scan_error", err).
					Msg("processes still run under a uid of RUN_UID_RANGE that no run holds (left by a worker that died?); skipping that uid until they are gone")
			}
			l.Release()
			continue
		}
		if p.warned[uid] {
			// Its processes outlived its run's release (or its worker), and
			// may have left files after that release removed the uid's.
			if n, err := RemoveLeftovers(uid); err != nil || n > 0 {
				p.log.Info().Uint32("uid", uid).Int("removed", n).AnErr("error", err).
					Msg("removed what the uid's last processes left in the shared temporary dirs and SysV IPC")
			}
			delete(p.warned, uid)
		}
		p.next = off + 1
		return l, nil
	}
	return nil, fmt.Errorf("no free uid in RUN_UID_RANGE %s: every uid is held by a live run, used by an account, or still has processes; widen the range", p.r)
}

// LockUID takes uid's lock file in dir, or returns nil when another holder
// has it: a worker's pool, or the guard of a worker that died, sweeping
// what was left under the uid (guardExit).
func LockUID(dir string, uid uint32) (*UIDLease, error) {
	// O_CLOEXEC (Go's default): a run must never inherit the lock.
	f, err := os.OpenFile(filepath.Join(dir, strconv.FormatUint(uint64(uid), 10)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open the lock of uid %d: %w", uid, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot lock uid %d: %w", uid, err)
	}
	return &UIDLease{uid: uid, lock: f}, nil
}

// release gives the uid back. Only call it once no process of the uid is
// left (KillUID).
func (l *UIDLease) Release() {
	if l != nil && l.lock != nil {
		l.lock.Close() // drops the flock
		l.lock = nil
	}
}

// accountUses reports whether an account or a group has the number uid: a
// run under it would get that account's files (and, as gid, that group's).
func accountUses(uid uint32) bool {
	s := strconv.FormatUint(uint64(uid), 10)
	if _, err := user.LookupId(s); err == nil {
		return true
	}
	_, err := user.LookupGroupId(s)
	return err == nil
}
