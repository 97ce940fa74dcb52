package command

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// withUndelivered gives the execs command among cmds its --undelivered
// flag: the execs of an executor whose writes have not reached the home
// yet (pending), with what their last push met.
func withUndelivered(cmds []*cli.Command) []*cli.Command {
	for _, c := range cmds {
		if c.Name != "execs" {
			continue
		}
		list := c.Action
		c.Flags = append(c.Flags, &cli.BoolFlag{Name: "undelivered", Aliases: []string{"u"},
			Usage: "only the execs whose writes wait to reach the home (on an executor), oldest first"})
		c.Action = func(ctx *cli.Context) error {
			if ctx.Bool("undelivered") {
				return undeliveredCmd(ctx)
			}
			return list(ctx)
		}
	}
	return cmds
}

func undeliveredCmd(c *cli.Context) error {
	if c.NArg() != 1 {
		return &usageError{"usage: agentctl execs WS --undelivered"}
	}
	list, err := clientOf(c).Undelivered(c.Context, c.Args().First())
	if err != nil {
		return err
	}
	return output(c, list, func(w io.Writer) {
		if len(list) == 0 {
			fmt.Fprintln(w, "every exec's writes have reached the home")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tENDED\tSTATE\tEXIT\tCOMMAND\tWAITING FOR")
		for _, e := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Ended.Format("15:04:05"), e.PendingState, e.ExitCode,
				commandLine(e.Argv), waitingFor(e.Error))
		}
		tw.Flush()
	})
}

// waitingFor is what a pending exec's error says its push met.
func waitingFor(msg string) string {
	if _, after, ok := strings.Cut(msg, "waiting for the home: "); ok {
		return after
	}
	return msg
}
