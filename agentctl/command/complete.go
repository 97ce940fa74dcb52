package command

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/client"
	"computerd/wire"
)

// completeFlag, as the last argument, asks agentctl for the words that
// may stand where the shell's cursor is (urfave/cli's name for it). The
// completion scripts pass every word from the command's first to the one
// being completed, that one included (empty at a new word).
const completeFlag = "--generate-bash-completion"

// completeTimeout bounds the list call that completes a workspace name:
// a shell waits for it at every TAB.
const completeTimeout = 2 * time.Second

// complete prints, one a line, the candidates for the last of args
// (the word being completed) given the words before it: subcommands, a
// command's flags (once the word starts with "-"), and the tenant's
// workspace names where the command takes WS (asked of computerd when
// it answers; nothing when it does not). Where it has nothing to offer it
// prints nothing, and the scripts fall back to file names.
func complete(ctx context.Context, cmds []*cli.Command, args []string, w io.Writer) error {
	cur := ""
	if len(args) > 0 {
		cur, args = args[len(args)-1], args[:len(args)-1]
	}
	words := completions(ctx, cmds, args, cur)
	for _, s := range words {
		if strings.HasPrefix(s, cur) {
			fmt.Fprintln(w, s)
		}
	}
	return nil
}

// completions are the candidates for cur after args, not yet filtered
// by cur.
func completions(ctx context.Context, cmds []*cli.Command, args []string, cur string) []string {
	global := map[string]string{}
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--"; i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if globalValueFlags[name] && !hasVal {
			if i+1 == len(args) {
				return nil // cur is the flag's value
			}
			i++
			val = args[i]
		}
		global[name] = val
	}
	var cmd *cli.Command
	level := cmds
	for ; i < len(args); i++ {
		next := findCommand(level, args[i])
		if next == nil {
			break
		}
		cmd, level = next, next.Subcommands
	}
	if cmd == nil || len(cmd.Subcommands) > 0 {
		switch {
		case i < len(args):
			return nil // a word that is no command
		case strings.HasPrefix(cur, "-") && cmd == nil:
			return append(flagWords(appFlags()), "--version")
		case strings.HasPrefix(cur, "-"):
			return []string{"--help"}
		}
		var names []string
		for _, c := range level {
			if !c.Hidden {
				names = append(names, c.Name)
			}
		}
		return names
	}
	positional, rest := 0, false
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case rest:
			positional++
		case a == "--":
			rest = true
		case len(a) > 1 && strings.HasPrefix(a, "-"):
			if !strings.Contains(a, "=") && flagTakesValue(cmd, a) {
				if i+1 == len(args) {
					return nil // cur is the flag's value
				}
				i++
			}
		default:
			positional++
		}
	}
	if strings.HasPrefix(cur, "-") && !rest {
		return flagWords(cmd.Flags)
	}
	if kinds := strings.Fields(cmd.ArgsUsage); positional < len(kinds) && strings.Trim(kinds[positional], "[]") == "WS" {
		return workspaceNames(ctx, global)
	}
	return nil
}

// flagWords are the names of flags as they are typed: --long, -s.
func flagWords(flags []cli.Flag) []string {
	var out []string
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		for _, n := range f.Names() {
			if len(n) == 1 {
				out = append(out, "-"+n)
			} else {
				out = append(out, "--"+n)
			}
		}
	}
	return append(out, "--help")
}

// workspaceNames lists the tenant's workspaces, with the server, token
// and CAs the command line would use; nothing when that fails.
func workspaceNames(ctx context.Context, global map[string]string) []string {
	setting := func(flag, env string) string {
		if v, ok := global[flag]; ok {
			return v
		}
		return os.Getenv(env)
	}
	server := setting("server", "COMPUTER_URL")
	if server == "" {
		server = DefaultServer
	}
	server, err := serverURL(server)
	if err != nil {
		return nil
	}
	token, err := wire.ReadToken(setting("token-file", "COMPUTER_TOKEN_FILE"))
	if err != nil {
		return nil
	}
	tr, err := wire.NewTransport(setting("ca", "COMPUTER_CA"))
	if err != nil {
		return nil
	}
	cl := client.New(server, token)
	cl.HTTP.Transport = tr
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	list, err := cl.Workspaces(ctx)
	if err != nil {
		return nil
	}
	names := make([]string, len(list))
	for i, ws := range list {
		names[i] = ws.Name
	}
	return names
}

// completion prints a shell function that asks agentctl itself for
// candidates (complete), passing the words up to the cursor's.
func completion(c *cli.Context) error {
	switch c.Args().First() {
	case "bash":
		fmt.Fprint(c.App.Writer, bashCompletion)
	case "zsh":
		fmt.Fprint(c.App.Writer, zshCompletion)
	default:
		return &usageError{"completion: want bash or zsh"}
	}
	return nil
}

// bashCompletion: source <(agentctl completion bash). Candidates come
// already filtered by the word at the cursor; none, and bash completes
// file names (-o default).
const bashCompletion = `# agentctl completion for bash: source <(agentctl completion bash)
_agentctl() {
	local IFS=$'\n'
	COMPREPLY=($("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:COMP_CWORD}" ` + completeFlag + ` 2>/dev/null))
}
complete -o default -F _agentctl agentctl
`

// zshCompletion: source <(agentctl completion zsh), or save it as
// _agentctl in a directory of $fpath.
const zshCompletion = `#compdef agentctl
# agentctl completion for zsh: source <(agentctl completion zsh)
_agentctl() {
	local -a opts
	opts=("${(@f)$(${words[1]} "${(@)words[2,CURRENT]}" ` + completeFlag + ` 2>/dev/null)}")
	if [[ -n ${opts[1]} ]]; then
		compadd -- "${opts[@]}"
	else
		_files
	fi
}
if [[ $funcstack[1] == _agentctl ]]; then
	_agentctl "$@"
else
	compdef _agentctl agentctl
fi
`
