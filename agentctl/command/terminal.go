package command

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f (agentctl's stdin, stdout or stderr) is a
// terminal: one a TCGETS answers, which /dev/null, a character device
// too, does not.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	rc, err := file.SyscallConn()
	if err != nil {
		return false
	}
	var terr error
	if err := rc.Control(func(fd uintptr) { _, terr = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); err != nil {
		return false
	}
	return terr == nil
}

// confirm asks question on w and reads the answer from r: y or yes is
// yes, anything else (an empty line, the end of input) no.
func confirm(r io.Reader, w io.Writer, question string) bool {
	fmt.Fprintf(w, "%s [y/N] ", question)
	line, _ := bufio.NewReader(r).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
