// Command agentctl is the thin client of computerd: workspaces, file
// tools, revisions and exec. Run `agentctl --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"computerd/agentctl/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := command.Run(ctx, os.Args, command.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	if _, isExit := err.(*command.ExitError); err != nil && !isExit {
		fmt.Fprintln(os.Stderr, "agentctl:", err)
	}
	os.Exit(command.ExitStatus(err))
}
