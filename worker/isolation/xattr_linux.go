//go:build linux

package isolation

import "golang.org/x/sys/unix"

func getxattrSize(path, name string) (int, error) { return unix.Getxattr(path, name, nil) }
