//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// peerGone reports, without blocking, whether an idle pooled connection is
// unusable: the upstream closed it (EOF, reset) or sent something unasked
// (such as a timeout answer before closing). One recv(MSG_PEEK) syscall.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
		case err != nil, n >= 0:
			gone = true
		}
		return true // never wait
	})
	return gone
}
