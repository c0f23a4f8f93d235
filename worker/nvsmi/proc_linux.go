//go:build linux

package nvsmi

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"
)

// procfsReader reads /proc (or another procfs mount, for tests) with
// prometheus/procfs, whose stat parser takes the comm field from the first
// "(" to the last ")", so a command named "a) (b" cannot shift the fields.
type procfsReader struct {
	root string
	fs   procfs.FS
}

func newProcReader(root string) (procReader, error) {
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, err
	}
	return &procfsReader{root: root, fs: fs}, nil
}

func (r *procfsReader) stat(pid int) (procStat, error) {
	p, err := r.fs.Proc(pid)
	if err != nil {
		return procStat{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return procStat{}, err
	}
	return procStat{pgid: st.PGRP, ppid: st.PPID, state: st.State, comm: st.Comm}, nil
}

func (r *procfsReader) owner(pid int) (uint32, error) {
	fi, err := os.Stat(filepath.Join(r.root, strconv.Itoa(pid)))
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no owner in stat")
	}
	return st.Uid, nil
}

func (r *procfsReader) cmdline(pid int) (string, error) {
	p, err := r.fs.Proc(pid)
	if err != nil {
		return "", err
	}
	args, err := p.CmdLine()
	if err != nil {
		return "", err
	}
	return strings.Join(args, " "), nil
}
