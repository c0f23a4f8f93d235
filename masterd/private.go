package masterd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/secure"
)

// privatePaths makes what holds the master's state private to its uid
// (c.SQLitePath, c.LogDir and c.ArtifactDir filled in): the data dir,
// LOG_DIR and ARTIFACT_DIR get mode 0700 (fixed if looser), the directory of a SQLITE_PATH elsewhere must
// already be private (it may not be rlsched's to change), and the database
// files lose every bit for others, or are created 0600.
func (c *Config) privatePaths(log zerolog.Logger) error {
	for _, d := range []string{c.DataDir, c.LogDir, c.ArtifactDir} {
		if d == "" {
			continue // ARTIFACT_DIR with S3
		}
		if err := ensureDir(d, 0o700, log); err != nil {
			return err
		}
	}
	if c.MySQLDSN != "" {
		return nil
	}
	abs, err := filepath.Abs(c.SQLitePath)
	if err != nil {
		return fmt.Errorf("cannot resolve SQLITE_PATH %q: %w", c.SQLitePath, err)
	}
	if dataAbs, _ := filepath.Abs(c.DataDir); filepath.Dir(abs) != dataAbs {
		if err := secure.CheckPrivateDir(filepath.Dir(abs), "SQLITE_PATH "+abs); err != nil {
			return fmt.Errorf("cannot start the master: %w", err)
		}
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := TightenFile(abs+suffix, log); err != nil {
			return err
		}
	}
	// On a first start the database does not exist yet, and SQLite would
	// create it (and its -wal and -shm files, which take the database's
	// mode) under the umask: made here, empty (a valid empty database), it
	// is 0600 from its first byte.
	f, err := os.OpenFile(abs, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cannot create the database file %s: %w", abs, err)
	}
	return nil
}

// UpLayout prepares `rlsched up`'s data dir, which holds the master's state
// and the local workers' data dirs apart:
//
//	DIR/             0711  runs pass through to their output dirs, list nothing
//	  master/        0700  the master's data dir: secrets.env, rlsched.db, logs/
//	  workers/       0711  one worker data dir per local worker (worker/isolation.go)
//
// A data dir of the earlier layout (secrets.env, rlsched.db and logs/ in DIR
// itself) is moved into DIR/master, less what keep names (a SQLITE_PATH or
// LOG_DIR set explicitly stays where it was pointed).
func UpLayout(dir string, keep map[string]bool, log zerolog.Logger) (masterDir, workersDir string, err error) {
	masterDir, workersDir = filepath.Join(dir, "master"), filepath.Join(dir, "workers")
	if err := ensureDir(dir, 0o711, log); err != nil {
		return "", "", err
	}
	if err := migrateUpState(dir, masterDir, keep, log); err != nil {
		return "", "", err
	}
	if err := ensureDir(masterDir, 0o700, log); err != nil {
		return "", "", err
	}
	if err := ensureDir(workersDir, 0o711, log); err != nil {
		return "", "", err
	}
	return masterDir, workersDir, nil
}

// upStateNames are what the master kept in up's data dir before issue 12.
var upStateNames = []string{"secrets.env", "rlsched.db", "rlsched.db-wal", "rlsched.db-shm", "rlsched.db-journal", "logs"}

func migrateUpState(dir, masterDir string, keep map[string]bool, log zerolog.Logger) error {
	if _, err := os.Lstat(masterDir); !errors.Is(err, fs.ErrNotExist) {
		return nil // already in the new layout (or unreadable: ensureDir says so)
	}
	var found []string
	for _, n := range upStateNames {
		if keep[n] {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			found = append(found, n)
		}
	}
	if len(found) == 0 {
		return nil
	}
	if err := ensureDir(masterDir, 0o700, log); err != nil {
		return err
	}
	for _, n := range found {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(masterDir, n)); err != nil {
			return fmt.Errorf("cannot move %s into %s (the master's state now lives there, out of the runs' reach): %w; move it by hand", n, masterDir, err)
		}
	}
	log.Warn().Strs("moved", found).Str("to", masterDir).Msg("moved the master's state out of the data dir that local runs pass through")
	return nil
}

func ensureDir(dir string, perm fs.FileMode, log zerolog.Logger) error {
	changed, err := secure.EnsureDir(dir, perm)
	if err != nil {
		return fmt.Errorf("cannot prepare a private directory: %w", err)
	}
	if changed != "" {
		log.Warn().Str("change", changed).Msg("tightened the mode of a directory rlsched keeps its state in")
	}
	return nil
}

// TightenFile takes every permission bit for others off path, logging a
// change, when it exists.
func TightenFile(path string, log zerolog.Logger) error {
	changed, err := secure.TightenFile(path, 0o600)
	if err != nil {
		return fmt.Errorf("cannot make a file private: %w", err)
	}
	if changed != "" {
		log.Warn().Str("change", changed).Msg("tightened the mode of a file rlsched keeps its state in")
	}
	return nil
}
