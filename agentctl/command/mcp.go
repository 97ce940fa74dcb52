package command

import (
	"errors"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"computerd/mcpserver"
)

func mcpCommands() []*cli.Command {
	return []*cli.Command{
		cmd("mcp", "serve the workspace's tools over the Model Context Protocol on stdin and stdout (for Claude Code, Codex, OpenCode, ...)",
			"[WS]", 0, 1, serveMCP),
	}
}

// serveMCP serves MCP on stdio until the harness closes stdin. Without WS
// every tool call names its workspace.
func serveMCP(c *cli.Context) error {
	srv := mcpserver.New(clientOf(c), c.Args().First())
	err := srv.Run(c.Context, &mcp.IOTransport{Reader: io.NopCloser(c.App.Reader), Writer: nopWriteCloser{c.App.Writer}})
	if errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) || c.Context.Err() != nil {
		return nil // the harness went away: a normal end
	}
	return err
}

// nopWriteCloser leaves stdout open when the session closes its writer.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
