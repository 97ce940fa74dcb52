package command

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"computerd/internal/clihelp"
)

// appExamples end computerd --help.
const appExamples = `computerd serve                                   # as root: data in /var/lib/computerd
computerd token create my-team                    # beside it: a bearer token for agentctl
computerd serve --data /srv/computerd --no-exec   # not root: the API and the store, no exec`

// examples are the help's example of each command, by its path.
var examples = map[string]string{
	"serve": `computerd serve --data /var/lib/computerd --listen 127.0.0.1:7777
computerd serve --exec-max-memory 8G --quota-bytes 500G --mount-root /srv/mounts`,
	"token":        `computerd token create --data /var/lib/computerd my-team`,
	"token create": "export COMPUTER_TOKEN=$(computerd token create --data /var/lib/computerd my-team)\ncomputerd token create --scope mount my-team   # may mount workspaces under --mount-root",
	"token ls":     `computerd token ls --data /var/lib/computerd`,
	"token revoke": `computerd token revoke 3f9c2a7d1e0b4c58`,
	"tenant":       `computerd tenant ls`,
	"tenant ls":    `computerd tenant ls --json`,
	"tenant set":   "computerd tenant set --quota-bytes 10G --max-workspaces 50 my-team\ncomputerd tenant set --quota-bytes default my-team",
	"store":        `computerd store ls --tenant my-team`,
	"store import": `computerd store import --tenant my-team proj ~/src/proj   # computerd serve stopped`,
	"store ls":     `computerd store ls --tenant my-team`,
	"store log":    `computerd store log --tenant my-team proj`,
	"store diff":   `computerd store diff --tenant my-team --stat proj 3 5`,
	"store cat":    `computerd store cat --tenant my-team --rev 3 proj main.go`,
	"store fsck":   `computerd store fsck --all --hashes   # computerd serve stopped`,
	"store gc":     `computerd store gc --keep 100 --keep-for 168h   # computerd serve stopped`,
}

// usageError is a command line a computerd command cannot take: one line
// naming the whole command, instead of urfave/cli's "Incorrect Usage"
// and the whole help.
func usageError(c *cli.Context, err error, _ bool) error {
	return fmt.Errorf("%w (see %s --help)", err, clihelp.CommandPath(c))
}
