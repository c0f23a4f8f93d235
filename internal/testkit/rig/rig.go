// Package rig starts real rlsched processes for the process tests (e2e,
// e2e/chaos, gateway, webtest, docs): the binary under test, the
// environment a server gets, a directory and free ports per process, the
// JSON log read back, one REST request and a client that logs in, and a
// cleanup through t.Cleanup. A test package keeps on top only what is its
// own (the chaos world's faults, the webtest's browser).
//
// It is imported by tests only. It must never leave a process running once
// its test has ended: a Cluster kills its processes in t.Cleanup, and every
// process it launches dies with the test binary.
package rig

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"
)

// Password is the password of every user the tests register.
const Password = "a-long-password"

// RandHex is n random bytes in hex: secrets and names no other test shares.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreePort returns a TCP port of loopback that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
