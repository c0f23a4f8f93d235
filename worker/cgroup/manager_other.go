//go:build !linux

package cgroup

import (
	"errors"
	"os/exec"
	"time"
)

// Manager enforces nothing off Linux.
type Manager struct{ warning string }

// Group is never made off Linux.
type Group struct{}

func Open(o Options) (*Manager, error) {
	if o.Mode == Required {
		return nil, errors.New("cannot start worker: RESOURCE_ENFORCEMENT=required needs Linux control groups; set RESOURCE_ENFORCEMENT=best-effort")
	}
	return &Manager{warning: "runs are not limited to their cores, memory and GPUs: control groups need Linux"}, nil
}

func (m *Manager) Close()          {}
func (m *Manager) Kind() string    { return KindNone }
func (m *Manager) Warning() string { return m.warning }
func (m *Manager) Create(string, int32, uint64, Limits) (*Group, error) {
	return nil, nil
}
func (g *Group) Dir() string                     { return "" }
func (g *Group) Cores() string                   { return "" }
func (g *Group) Start(cmd *exec.Cmd) error       { return cmd.Start() }
func (g *Group) Kill(time.Duration) (int, error) { return 0, nil }
func (g *Group) Usage() Usage                    { return Usage{PeakMemoryMB: -1} }
func (g *Group) Remove()                         {}
func (g *Group) Now() Now                        { return Now{CPUNanos: -1, MemoryBytes: -1} }
