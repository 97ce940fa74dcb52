package command

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

func mountCommands() []*cli.Command {
	return []*cli.Command{
		cmd("mount", "serve the workspace as a directory on this host (computerd must run here)", "WS DIR", 2, 2, mountCmd),
		cmd("umount", "commit what is pending and unmount", "DIR", 1, 1, umountCmd),
		cmd("mounts", "list live mounts", "", 0, 0, mountsCmd),
	}
}

// absDir makes dir absolute, creating it if it is missing.
func absDir(dir string, create bool) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if create {
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return "", err
		}
	}
	return abs, nil
}

func mountCmd(c *cli.Context) error {
	dir, err := absDir(c.Args().Get(1), true)
	if err != nil {
		return err
	}
	info, err := clientOf(c).Mount(c.Context, c.Args().Get(0), dir)
	if err != nil {
		return err
	}
	return output(c, info, func(w io.Writer) {
		fmt.Fprintf(w, "mounted %s at %s (revision %d)\n", info.Workspace, info.Dir, info.Base)
	})
}

func umountCmd(c *cli.Context) error {
	dir, err := absDir(c.Args().First(), false)
	if err != nil {
		return err
	}
	if err := clientOf(c).Unmount(c.Context, dir); err != nil {
		return err
	}
	return output(c, map[string]string{"unmounted": dir}, func(w io.Writer) { fmt.Fprintln(w, "unmounted", dir) })
}

func mountsCmd(c *cli.Context) error {
	list, err := clientOf(c).Mounts(c.Context)
	if err != nil {
		return err
	}
	return output(c, list, func(w io.Writer) {
		for _, m := range list {
			line := fmt.Sprintf("%s\t%s\trevision %d", m.Dir, m.Workspace, m.Base)
			if m.Error != "" {
				line += "\t" + m.Error
			}
			fmt.Fprintln(w, line)
		}
	})
}
