package command

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/core"
	"computerd/fsstore"
)

// storeCommand groups offline tools that work on a data directory directly.
// Those that write (import, gc) and fsck, whose walk across many
// snapshots would report rows that a running daemon's retention removes
// under it, take the data directory's lock and so refuse while computerd
// serve runs; ls, log, diff and cat read beside it (withSharedStore).
func storeCommand() *cli.Command {
	flags := []cli.Flag{dataFlag, tenantFlag, jsonFlag}
	return &cli.Command{
		Name:  "store",
		Usage: "inspect and maintain a data directory offline",
		Subcommands: []*cli.Command{
			{
				Name: "import", Usage: "import a local directory as one revision (creating the workspace)",
				ArgsUsage: "WS DIR",
				Flags:     append(flags, &cli.BoolFlag{Name: "replace", Usage: "make the workspace hold exactly DIR"}),
				Action:    withStore(storeImport),
			},
			{Name: "ls", Usage: "list workspaces", Flags: flags, Action: withSharedStore(storeList)},
			{Name: "log", Usage: "list a workspace's revisions", ArgsUsage: "WS", Flags: flags, Action: withSharedStore(storeLog)},
			{
				Name: "diff", Usage: "show what changed between two revisions", ArgsUsage: "WS R1 R2",
				Flags:  append(flags, &cli.BoolFlag{Name: "stat", Usage: "summary per file"}),
				Action: withSharedStore(storeDiff),
			},
			{Name: "cat", Usage: "print a file", ArgsUsage: "WS PATH", Flags: append(flags, revFlag), Action: withSharedStore(storeCat)},
			{
				Name: "fsck", Usage: "check the database and every workspace tree", Flags: append(flags,
					&cli.BoolFlag{Name: "all", Usage: "check every retained revision, not only heads"},
					&cli.BoolFlag{Name: "hashes", Usage: "verify every chunk's hash"}),
				Action: withStore(storeFsck),
			},
			{
				Name: "gc", Usage: "prune old revisions of every workspace, then delete unreferenced chunks", Flags: append(flags,
					&cli.IntFlag{Name: "keep", Usage: "revisions to keep per workspace (0: all)"},
					&cli.DurationFlag{Name: "keep-for", Usage: "also keep revisions younger than this"}),
				Action: withStore(storeGC),
			},
		},
	}
}

func storeImport(c *cli.Context, s *fsstore.Store) error {
	name, dir := c.Args().Get(0), c.Args().Get(1)
	if name == "" || dir == "" {
		return fmt.Errorf("usage: computerd store import WS DIR")
	}
	w, err := s.Workspace(c.Context, c.String("tenant"), name)
	if errors.Is(err, core.ErrWorkspaceNotFound) {
		w, err = s.CreateWorkspace(c.Context, c.String("tenant"), name)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	rev, err := s.ImportDir(c.Context, w.ID, dir, c.Bool("replace"), fsstore.CommitInfo{Source: core.SourceAPI, Message: "import " + dir}, nil)
	if err != nil {
		return err
	}
	return output(c, rev, func(w io.Writer) {
		fmt.Fprintf(w, "%s: revision %d (%d ops in %s)\n", name, rev.Rev, rev.Changes, time.Since(start).Round(time.Millisecond))
	})
}

func storeList(c *cli.Context, s *fsstore.Store) error {
	wss, err := s.Workspaces(c.Context, c.String("tenant"))
	if err != nil {
		return err
	}
	return output(c, wss, func(w io.Writer) {
		for _, ws := range wss {
			fmt.Fprintf(w, "%s\thead %d\n", ws.Name, ws.Head)
		}
	})
}

func storeLog(c *cli.Context, s *fsstore.Store) error {
	w, err := workspaceArg(c, s, 0)
	if err != nil {
		return err
	}
	log, err := s.Log(c.Context, w.ID, 0)
	if err != nil {
		return err
	}
	return output(c, log, func(out io.Writer) { printLog(out, log) })
}

// printLog prints revisions one per line, newest first.
func printLog(w io.Writer, log []core.Revision) {
	for _, r := range log {
		line := fmt.Sprintf("%d\t%s\t%s", r.Rev, r.Time.Format(time.RFC3339), r.Source)
		if r.ExecID != "" {
			line += "\texec " + r.ExecID
		}
		if r.Message != "" {
			line += "\t" + r.Message
		}
		fmt.Fprintln(w, line)
	}
}

func storeDiff(c *cli.Context, s *fsstore.Store) error {
	w, err := workspaceArg(c, s, 0)
	if err != nil {
		return err
	}
	r1, err := revArg(c, 1)
	if err != nil {
		return err
	}
	r2, err := revArg(c, 2)
	if err != nil {
		return err
	}
	if c.Bool("stat") || c.Bool("json") {
		files, err := s.DiffFiles(c.Context, w.ID, r1, r2)
		if err != nil {
			return err
		}
		return output(c, files, func(out io.Writer) { core.WriteStat(out, files) })
	}
	return s.WriteDiff(c.Context, c.App.Writer, w.ID, r1, r2)
}

func storeCat(c *cli.Context, s *fsstore.Store) error {
	w, err := workspaceArg(c, s, 0)
	if err != nil {
		return err
	}
	sn, err := s.Snapshot(c.Context, w.ID, c.Int64("rev"))
	if err != nil {
		return err
	}
	f, err := sn.Open(c.Context, c.Args().Get(1))
	if err != nil {
		return err
	}
	_, err = f.WriteTo(c.App.Writer)
	return err
}

func storeFsck(c *cli.Context, s *fsstore.Store) error {
	rep, err := s.Check(c.Context, fsstore.CheckOptions{AllRevisions: c.Bool("all"), Hashes: c.Bool("hashes")})
	if err != nil {
		return err
	}
	if err := output(c, rep, func(w io.Writer) {
		fmt.Fprintf(w, "%d workspaces, %d revisions, %d entries, %d chunks verified\n", rep.Workspaces, rep.Revisions, rep.Entries, rep.Chunks)
		for _, p := range rep.Problems {
			fmt.Fprintln(w, "problem:", p)
		}
	}); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d problems found", len(rep.Problems))
	}
	return nil
}

func storeGC(c *cli.Context, s *fsstore.Store) error {
	policy := fsstore.Policy{KeepLast: c.Int("keep"), KeepFor: c.Duration("keep-for")}
	total, err := s.Retain(c.Context, policy)
	if err != nil {
		return err
	}
	return output(c, total, func(w io.Writer) {
		fmt.Fprintf(w, "pruned %d revisions (%d rows); freed %d chunks (%d bytes)\n", total.Revisions, total.Rows, total.Chunks, total.ChunkBytes)
	})
}

var _ = os.Stdout
