package command

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// geteuid is os.Geteuid, a seam for the test of needRoot.
var geteuid = os.Geteuid

// needRoot refuses computerd serve with exec on by a user other than
// root, before anything starts: each exec runs in a container (user and
// mount namespaces, cgroups) over an overlay on a FUSE view, and the
// first of them to fail would otherwise surface as a bare "permission
// denied" from deep in exec recovery.
func needRoot(c *cli.Context) error {
	if c.Bool("no-exec") || geteuid() == 0 {
		return nil
	}
	return fmt.Errorf("sandboxed exec needs root (containers, FUSE, overlayfs), and this is user id %d: "+
		"run computerd serve as root (contrib/computerd.service does), "+
		"or add --no-exec to serve without it: workspaces, files, history, attach, export and search work, "+
		"exec answers 503 unavailable (host mounts need root as well)", geteuid())
}
