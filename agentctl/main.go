// Command agentctl is the thin client of computerd: workspaces, file
// tools, revisions and exec. Run `agentctl --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"computerd/agentctl/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	status := command.Main(ctx, os.Args, command.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(status)
}
