// Package clihelp holds the help conventions computerd's and agentctl's
// command lines share: every command shows an example, a flag's default
// shows only when it tells something the flag's usage does not, and a
// usage error is one line that names the whole command.
package clihelp

import (
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

func init() {
	// urfave/cli appends "(default: X)" to every flag that takes a
	// value, "(default: 0)" and "(default: false)" included, and after a
	// usage that already says what the default is.
	plain := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		s := plain(f)
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			return s
		}
		def := df.GetDefaultText()
		if def == "" || !quietDefault(df.GetUsage(), def) {
			return s
		}
		return strings.Replace(s, " (default: "+def+")", "", 1)
	}
}

// quietDefault reports whether a flag's default text def goes unsaid: it
// is a zero value, or the usage names the default itself.
func quietDefault(usage, def string) bool {
	switch def {
	case "0", "false", "0s", `""`, "[]":
		return true
	}
	return strings.Contains(strings.ToLower(usage), "default")
}

// Walk calls fn for every command beneath cmds, parents before their
// subcommands, with its path ("ws rm").
func Walk(cmds []*cli.Command, fn func(path string, c *cli.Command)) {
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(prefix + " " + c.Name)
			fn(p, c)
			walk(p, c.Subcommands)
		}
	}
	walk("", cmds)
}

// SetExamples puts each command's example (examples[path], one command
// line per line) at the end of its help, and returns the paths of the
// visible commands that have none.
func SetExamples(cmds []*cli.Command, examples map[string]string) (missing []string) {
	Walk(cmds, func(path string, c *cli.Command) {
		ex, ok := examples[path]
		if !ok {
			if !c.Hidden {
				missing = append(missing, path)
			}
			return
		}
		base := cli.CommandHelpTemplate
		if len(c.Subcommands) > 0 {
			base = cli.SubcommandHelpTemplate
		}
		c.CustomHelpTemplate = base + examplesSection(ex)
	})
	return missing
}

// AppTemplate is the app's help template with examples at its end.
func AppTemplate(examples string) string { return cli.AppHelpTemplate + examplesSection(examples) }

// examplesSection is an EXAMPLES section of a help template. The text
// goes in as a quoted constant, so that braces in it are never template
// actions.
func examplesSection(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, l := range lines {
		lines[i] = "   " + l
	}
	title := "EXAMPLE"
	if len(lines) > 1 {
		title = "EXAMPLES"
	}
	return "\n" + title + ":\n{{" + strconv.Quote(strings.Join(lines, "\n")) + "}}\n"
}

// CommandPath is the whole command a context runs, from the program's
// name on ("agentctl ws rm").
func CommandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" {
			names = append(names, x.Command.Name)
		}
	}
	if c.App != nil && (len(names) == 0 || names[len(names)-1] != c.App.Name) {
		names = append(names, c.App.Name)
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, " ")
}
