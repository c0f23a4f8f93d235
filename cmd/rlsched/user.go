package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store/sqlite"
)

// runUser manages accounts directly in the store: `user add NAME [--admin]`
// reads the password from standard input.
func runUser(ctx context.Context, args []string) error {
	if len(args) < 2 || args[0] != "add" {
		return usageError{errors.New("usage: rlsched user add NAME [--admin] [--data-dir D] < password")}
	}
	name := args[1]
	var dataDir, sqlitePath string
	var admin bool
	f := newFlags("user add")
	f.str(&dataDir, "data-dir", "RLSCHED_DATA_DIR", defaultDataDir(), "data directory of the master (of rlsched up: its DATA_DIR/master)")
	f.str(&sqlitePath, "sqlite-path", "SQLITE_PATH", "", "SQLite database file (default DATA_DIR/rlsched.db)")
	f.BoolVar(&admin, "admin", false, "make the user an ADMIN")
	if err := f.parse(args[2:]); err != nil {
		return err
	}
	if !core.ValidUsername(name) {
		return usageError{fmt.Errorf("invalid user name %q: 3-32 of A-Z a-z 0-9 _ . -", name)}
	}
	pw, err := bufio.NewReader(os.Stdin).ReadString('\n')
	pw = strings.TrimRight(pw, "\r\n")
	if len(pw) < 8 {
		return usageError{errors.New("the password (read from standard input) must have at least 8 characters")}
	}
	if sqlitePath == "" {
		sqlitePath = filepath.Join(dataDir, "rlsched.db")
	}
	st, err := sqlite.Open(sqlitePath)
	if err != nil {
		return err
	}
	defer st.Close()
	hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	u := core.User{Username: name, PasswordHash: string(hash), Role: core.RoleUser}
	if admin {
		u.Role = core.RoleAdmin
	}
	if err := st.CreateUser(ctx, &u); err != nil {
		return fmt.Errorf("cannot add user: %w", err)
	}
	fmt.Printf("user %s (id %d, %s) added\n", u.Username, u.ID, u.Role)
	return nil
}
