package sandbox_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"computerd/computerd/sandbox"
)

// TestHostSocketsUnreachable: a socket the host listens on in the
// abstract namespace (where a path's permissions protect nothing) is out
// of reach, for the namespace belongs to the host's network namespace;
// and AF_VSOCK, which no network namespace confines and which reaches
// the hypervisor, cannot be opened at all.
func TestHostSocketsUnreachable(t *testing.T) {
	needHost(t, "/usr/bin/python3")
	m := MustManager(t)
	var b [6]byte
	rand.Read(b[:])
	name := "computerd-test-" + hex.EncodeToString(b[:])
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	// The host itself reaches it.
	if c, err := net.Dial("unix", "@"+name); err != nil {
		t.Fatalf("the host cannot reach its own socket: %v", err)
	} else {
		c.Close()
		<-accepted
	}
	script := fmt.Sprintf(`import socket
for family, addr in ((socket.AF_UNIX, "\0%s"),):
    try:
        socket.socket(family, socket.SOCK_STREAM).connect(addr)
        print("abstract: connected")
    except OSError as e:
        print("abstract:", e.strerror)
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print("vsock: opened")
except OSError as e:
    print("vsock:", e.strerror)
`, name)
	// The filter, not the kernel, must be what refuses it.
	if fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); err != nil {
		t.Logf("the host cannot open AF_VSOCK sockets either (%v): the check proves less", err)
	} else {
		unix.Close(fd)
	}
	res, o := MustRun(t, m, sandbox.Spec{Argv: []string{"python3", "-c", script}})
	want := "abstract: Connection refused\nvsock: Address family not supported by protocol\n"
	if got := o.stream(sandbox.Stdout); res.ExitCode != 0 || got != want {
		t.Errorf("stdout %q (exit %d, stderr %q), want %q", got, res.ExitCode, o.stream(sandbox.Stderr), want)
	}
	select {
	case <-accepted:
		t.Error("the host's abstract socket accepted a connection from the container")
	default:
	}
}
