package command

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"computerd/internal/clihelp"
)

// appExamples end agentctl --help: a first session.
const appExamples = `export COMPUTER_TOKEN=$(computerd token create my-team)   # on the computerd host
agentctl status                       # which computerd, which version, which tenant
agentctl ws create proj
agentctl attach proj ~/src/proj
agentctl exec proj -- go test ./...
agentctl log proj ; agentctl diff proj`

// examples are the help's example of each command, by its path. A
// command without one fails TestHelpExamples.
var examples = map[string]string{
	"ws":         "agentctl ws create proj ; agentctl ws ls",
	"ws create":  "agentctl ws create proj",
	"ws ls":      "agentctl ws ls --json",
	"ws rm":      "agentctl ws rm proj          # asks first\nagentctl ws rm --yes proj    # in a script",
	"ws fork":    "agentctl ws fork proj proj-try --rev 3",
	"attach":     "agentctl attach proj ~/src/proj\nagentctl attach proj release.tar.gz --into vendor/lib --merge",
	"export":     "agentctl export proj --rev 3 > proj.tar\nagentctl export proj -z -o proj.tar.gz --path src",
	"read":       "agentctl read proj src/main.go --offset 10 --limit 20",
	"write":      "echo 'hello' | agentctl write proj notes/todo.txt",
	"edit":       "agentctl edit proj main.go --old 'foo()' --new 'bar()'",
	"stat":       "agentctl stat proj go.mod",
	"ls":         "agentctl ls -l proj src",
	"find":       "agentctl find proj '*.go'\nagentctl find proj '**/testdata/*' src --type f",
	"grep":       "agentctl grep -n -C 2 proj 'func \\w+' --glob '*.go'",
	"rm":         "agentctl rm -r proj build",
	"mkdir":      "agentctl mkdir -p proj docs/design",
	"mv":         "agentctl mv proj old.go new.go",
	"log":        "agentctl log proj -n 10",
	"diff":       "agentctl diff proj           # the last revision's changes\nagentctl diff proj 2 5 --stat",
	"completion": "source <(agentctl completion bash)   # in ~/.bashrc\nsource <(agentctl completion zsh)    # in ~/.zshrc",
	"restore":    "agentctl restore proj --rev 2 src/main.go",
	"exec":       "agentctl exec proj --timeout 5m -- go test ./...\nagentctl exec proj --key build-42 --shell 'make && make check'",
	"execs":      "agentctl execs proj -n 20",
	"exec-log":   "agentctl exec-log proj x7f3a9c21d04e6b15",
	"kill":       "agentctl kill proj x7f3a9c21d04e6b15",
	"mount":      "agentctl mount proj /srv/mounts/proj",
	"umount":     "agentctl umount /srv/mounts/proj",
	"mounts":     "agentctl mounts",
	"status":     "agentctl status\nCOMPUTER_URL=http://build-host:7777 agentctl status --json",

	"agent":        `agentctl agent run proj "make the tests pass"`,
	"agent run":    `agentctl agent run proj "make the tests pass" --base-url http://127.0.0.1:11434/v1 --model qwen2.5-coder:7b` + "\n" + `OPENAI_API_KEY=sk-... agentctl agent run proj "fix the build" --detach`,
	"agent ls":     "agentctl agent ls proj",
	"agent show":   "agentctl agent show --report r3f9c2a7d1e0b4c58",
	"agent attach": "agentctl agent attach r3f9c2a7d1e0b4c58",
	"agent resume": "agentctl agent resume r3f9c2a7d1e0b4c58",
	"agent cancel": "agentctl agent cancel r3f9c2a7d1e0b4c58",
	"memory":       `agentctl memory add "the tests run with make check"`,
	"memory add":   `agentctl memory add "the tests run with make check"`,
	"memory ls":    "agentctl memory ls",
	"memory rm":    "agentctl memory rm 3",
	"skill":        "agentctl skill save release --file release.md ; agentctl skill run proj release",
	"skill save":   "agentctl skill save release --file release.md --description 'cut a release'",
	"skill ls":     "agentctl skill ls",
	"skill show":   "agentctl skill show release",
	"skill rm":     "agentctl skill rm release",
	"skill run":    "agentctl skill run proj release",
	"mcp":          "agentctl mcp proj    # as a harness's MCP server command",
}

// explain gives every command of cmds its example and one-line usage
// errors, and returns the visible commands that have no example.
func explain(cmds []*cli.Command) (missing []string) {
	missing = clihelp.SetExamples(cmds, examples)
	clihelp.Walk(cmds, func(_ string, c *cli.Command) { c.OnUsageError = onUsageError })
	return missing
}

// onUsageError is a command line a command cannot take (a flag it does
// not have): one line naming the whole command, instead of urfave/cli's
// "Incorrect Usage" and the whole help.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return &usageError{fmt.Sprintf("%v (see %s --help)", err, clihelp.CommandPath(c))}
}
