// Command computerd owns the durable workspace store; `computerd store ...`
// inspects and maintains a data directory offline.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"computerd/computerd/command"
	"computerd/computerd/sandbox"
)

func main() {
	sandbox.Init() // a re-executed container init never returns
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := command.Run(ctx, os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "computerd:", err)
		os.Exit(1)
	}
}
