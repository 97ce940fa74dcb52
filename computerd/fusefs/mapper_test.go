package fusefs_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A mapper is a child process (this test binary with FUSEFS_MAPPER set)
// that maps a file shared and reads and writes the mapping on command. A
// test must not fault on a mapping of a mount its own process serves: the
// fault blocks a thread the Go runtime cannot stop, and a collection that
// waits for it stops the goroutines that would answer the fault, for good.
type mapper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startMapper maps the first size bytes of path in a child process.
func startMapper(t *testing.T, path string, size int) *mapper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FUSEFS_MAPPER="+path, fmt.Sprintf("FUSEFS_MAPPER_SIZE=%d", size))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mapper{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		m.in.Close()
		m.cmd.Process.Kill()
		m.cmd.Wait()
	})
	if got := m.do(t, "ready"); got != "ok" {
		t.Fatalf("mapper: %s", got)
	}
	return m
}

// do sends one command and returns the answer; an error answer fails t.
func (m *mapper) do(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(m.in, cmd); err != nil {
		t.Fatalf("mapper %q: %v", cmd, err)
	}
	line, err := m.out.ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	if err != nil || strings.HasPrefix(line, "error") {
		t.Fatalf("mapper %q: %q %v", cmd, line, err)
	}
	return line
}

// read returns n bytes of the mapping at off.
func (m *mapper) read(t *testing.T, off, n int) string {
	t.Helper()
	s, err := strconv.Unquote(m.do(t, fmt.Sprintf("read %d %d", off, n)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// write copies s into the mapping at off.
func (m *mapper) write(t *testing.T, off int, s string) {
	t.Helper()
	m.do(t, fmt.Sprintf("write %d %q", off, s))
}

// runMapper is the child's side: it answers "ready", "read OFF N" (the
// bytes, quoted), "write OFF QUOTED", "msync" and "unmap" (then exits),
// one line each, "ok" or "error ...".
func runMapper() {
	var size int
	fmt.Sscan(os.Getenv("FUSEFS_MAPPER_SIZE"), &size)
	fail := func(err error) { fmt.Println("error", err) }
	f, err := os.OpenFile(os.Getenv("FUSEFS_MAPPER"), os.O_RDWR, 0)
	if err != nil {
		fail(err)
		os.Exit(1)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fail(err)
		os.Exit(1)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "ready":
			fmt.Println("ok")
		case "read":
			var off, n int
			if _, err := fmt.Sscan(rest, &off, &n); err != nil || off < 0 || off+n > size {
				fail(fmt.Errorf("read %q: %v", rest, err))
				continue
			}
			fmt.Println(strconv.Quote(string(mem[off : off+n])))
		case "write":
			offText, quoted, _ := strings.Cut(rest, " ")
			off, err := strconv.Atoi(offText)
			s, qerr := strconv.Unquote(quoted)
			if err != nil || qerr != nil || off < 0 || off+len(s) > size {
				fail(fmt.Errorf("write %q", rest))
				continue
			}
			copy(mem[off:], s)
			fmt.Println("ok")
		case "msync":
			if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
				fail(err)
				continue
			}
			fmt.Println("ok")
		case "unmap":
			if err := unix.Munmap(mem); err != nil {
				fail(err)
				os.Exit(1)
			}
			fmt.Println("ok")
			os.Exit(0)
		default:
			fail(fmt.Errorf("unknown command %q", verb))
		}
	}
}
