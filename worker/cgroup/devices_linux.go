package cgroup

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// bpf_cgroup_dev_ctx: access_type (type in the low 16 bits, access in the
// high), major, minor; BPF_DEVCG_DEV_CHAR.
const (
	devCtxAccess = 0
	devCtxMajor  = 4
	devCtxMinor  = 8
	devChar      = 2
)

// deviceProgram is a cgroup device program that refuses the character
// devices nvidiaMajor:m for every m in deny and allows every other device:
// v2's equivalent of the v1 deny list (denyDevicesV1).
func deviceProgram(deny []int) asm.Instructions {
	ins := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, devCtxAccess, asm.Word),
		asm.And.Imm(asm.R2, 0xffff),
		asm.JNE.Imm(asm.R2, devChar, "allow"),
		asm.LoadMem(asm.R3, asm.R1, devCtxMajor, asm.Word),
		asm.JNE.Imm(asm.R3, nvidiaMajor, "allow"),
		asm.LoadMem(asm.R4, asm.R1, devCtxMinor, asm.Word),
	}
	for _, m := range deny {
		ins = append(ins, asm.JEq.Imm(asm.R4, int32(m), "deny"))
	}
	return append(ins,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("allow"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("deny"),
		asm.Return(),
	)
}

// attachDeviceProgram loads the device program for deny and attaches it to
// the group at dir. It stays attached (BPF_F_ALLOW_MULTI beside any program
// of systemd's, all of which must allow) until the group is removed.
func attachDeviceProgram(dir string, deny []int) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.CGroupDevice,
		Instructions: deviceProgram(deny),
		License:      "Apache-2.0",
	})
	if err != nil {
		return fmt.Errorf("cannot load the device program: %w", err)
	}
	defer prog.Close()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: fd, Program: prog,
		Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI}); err != nil {
		return fmt.Errorf("cannot attach the device program to %s: %w", dir, err)
	}
	return nil
}
