package sandbox

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// notFoundError is a command that is not in the container: Argv[0] is
// on none of its PATH's directories, or names no file. It is ErrNotFound
// and ErrStart (the command never ran), and its message names the command
// and nothing of the container (its id, the stub, libcontainer).
type notFoundError struct{ name string }

func (e *notFoundError) Error() string { return e.name + ": command not found in the sandbox" }

func (e *notFoundError) Is(target error) bool { return target == ErrNotFound || target == ErrStart }

// commandError is err, the failure of a Run of argv, as a notFoundError
// when it says that argv[0] was not found: the lookup in the container
// (libcontainer's init, or a warm container's stub) failed with exec's
// error for it, `exec: "NAME": executable file not found in $PATH` or,
// for a path, `exec: "NAME": stat NAME: no such file or directory`.
func commandError(argv []string, err error) error {
	if err == nil || len(argv) == 0 || errors.Is(err, ErrNotFound) || !errors.Is(err, ErrStart) {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("exec: %q: ", argv[0])) {
		return err
	}
	if strings.Contains(msg, exec.ErrNotFound.Error()) || strings.Contains(msg, "no such file or directory") {
		return &notFoundError{name: argv[0]}
	}
	return err
}
