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

// mkdirs creates dir and its missing parents, and returns a function that
// removes what it created (while still empty).
func mkdirs(dir string) (undo func(), err error) {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		created = append(created, d)
	}
	undo = func() {
		for _, d := range created {
			os.Remove(d)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		undo()
		return nil, err
	}
	return undo, nil
}

func mountCmd(c *cli.Context) error {
	dir, err := filepath.Abs(c.Args().Get(1))
	if err != nil {
		return err
	}
	// A mount computerd refuses leaves no directory behind either.
	undo, err := mkdirs(dir)
	if err != nil {
		return err
	}
	info, err := clientOf(c).Mount(c.Context, c.Args().Get(0), dir)
	if err != nil {
		undo()
		return err
	}
	return output(c, info, func(w io.Writer) {
		fmt.Fprintf(w, "mounted %s at %s (revision %d)\n", info.Workspace, info.Dir, info.Base)
	})
}

func umountCmd(c *cli.Context) error {
	dir, err := filepath.Abs(c.Args().First())
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
