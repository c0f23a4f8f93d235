package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/mysql"
	"github.com/rlsched/rlsched/store/sqlite"
)

// runUser adds an account directly in the store, SQLite or MySQL: `user
// add NAME [--admin]` reads the password from standard input. It is how a
// closed server gets its first admin; everything else about users goes
// through REST (cli's `user`).
func runUser(ctx context.Context, args []string) error {
	if len(args) < 2 || args[0] != "add" {
		return usageError{errors.New("usage: rlsched user add NAME [--admin] [--data-dir D | --mysql-dsn DSN] < password")}
	}
	name := args[1]
	var dataDir, sqlitePath, dsn string
	var admin bool
	f := newFlags("user add")
	f.str(&dataDir, "data-dir", "RLSCHED_DATA_DIR", defaultDataDir(), "data directory of the master (of rlsched up: its DATA_DIR/master)")
	f.str(&sqlitePath, "sqlite-path", "SQLITE_PATH", "", "SQLite database file (default DATA_DIR/rlsched.db)")
	f.str(&dsn, "mysql-dsn", "MYSQL_DSN", "", "the master's MySQL DSN (empty: SQLite)")
	f.BoolVar(&admin, "admin", false, "make the user an ADMIN")
	if strings.HasPrefix(name, "-") { // --help, or flags before the name
		if err := f.parse(args[1:]); err != nil {
			return err
		}
		return usageError{errors.New("usage: rlsched user add NAME [--admin] [--data-dir D | --mysql-dsn DSN] < password")}
	}
	if err := f.parse(args[2:]); err != nil {
		return err
	}
	if !core.ValidUsername(name) {
		return usageError{fmt.Errorf("invalid user name %q: 3-32 of A-Z a-z 0-9 _ . -", name)}
	}
	pw, _ := bufio.NewReader(os.Stdin).ReadString('\n') // the last line may lack its newline
	pw = strings.TrimRight(pw, "\r\n")
	if utf8.RuneCountInString(pw) < 8 || len(pw) > 72 {
		return usageError{errors.New("the password (read from standard input) must be at least 8 characters and at most 72 bytes")}
	}
	var st store.Store
	var err error
	if dsn != "" {
		st, err = mysql.Open(dsn)
	} else {
		if sqlitePath == "" {
			sqlitePath = filepath.Join(dataDir, "rlsched.db")
		}
		st, err = sqlite.Open(sqlitePath)
	}
	if err != nil { // st may be a typed nil
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
