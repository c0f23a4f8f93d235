package linger

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// serveOnce accepts one connection, reads the first line, answers "no\n",
// arms the connection when arm is set, and closes it.
func serveOnce(t *testing.T, arm bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Listener: ln}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(c).ReadString('\n')
		_, _ = io.WriteString(c, "no\n")
		if arm && !Arm(c) {
			panic("Arm refused a Conn of a Listener")
		}
		_ = c.Close()
	}()
	return ln.Addr().String()
}

func TestArmedCloseDrains(t *testing.T) {
	c, err := net.Dial("tcp", serveOnce(t, true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	// More than loopback's socket buffers take: the server must read it.
	body := append([]byte("hello\n"), bytes.Repeat([]byte("x"), 12<<20)...)
	if _, err := c.Write(body); err != nil {
		t.Fatalf("the connection broke while sending: %v", err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "no\n" {
		t.Fatalf("read %q, %v; want the answer and EOF", got, err)
	}
}

func TestArmOnlyOurs(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Arm(a) {
		t.Fatal("Arm accepted a connection of another listener")
	}
}
