package command

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves a command's flags in front of its positional arguments,
// so `agentctl edit WS PATH --old a --new b` works: urfave/cli stops
// parsing flags at the first positional argument. Everything after "--"
// stays as it is (it belongs to the command being run, for exec).
func flagsFirst(cmds []*cli.Command, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// Global flags come first; find the command path.
	for len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "--" {
		out = append(out, rest[0])
		if takesValue(rest[0], globalValueFlags) && len(rest) > 1 {
			out = append(out, rest[1])
			rest = rest[1:]
		}
		rest = rest[1:]
	}
	var cmd *cli.Command
	for len(rest) > 0 {
		next := findCommand(cmds, rest[0])
		if next == nil {
			break
		}
		cmd, cmds = next, next.Subcommands
		out = append(out, rest[0])
		rest = rest[1:]
	}
	if cmd == nil || len(cmd.Subcommands) > 0 {
		return append(out, rest...)
	}
	var flags, positional []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			positional = append(positional, rest[i:]...)
			break
		}
		if len(a) > 1 && strings.HasPrefix(a, "-") {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && flagTakesValue(cmd, a) && i+1 < len(rest) {
				flags = append(flags, rest[i+1])
				i++
			}
			continue
		}
		positional = append(positional, a)
	}
	out = append(out, flags...)
	if len(positional) > 0 && positional[0] != "--" {
		out = append(out, "--")
	}
	return append(out, positional...)
}

// globalValueFlags are agentctl's global flags that take a value.
var globalValueFlags = map[string]bool{"server": true, "token-file": true, "ca": true, "token": true}

func takesValue(arg string, names map[string]bool) bool {
	name := strings.TrimLeft(arg, "-")
	return !strings.Contains(name, "=") && names[name]
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// flagTakesValue reports whether arg names a flag of cmd that is not boolean.
func flagTakesValue(cmd *cli.Command, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
