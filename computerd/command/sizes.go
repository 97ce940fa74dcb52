package command

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"computerd/core"
)

// sizeFlag is a flag that takes a size as every size flag of computerd
// and agentctl does: 512M, 4G (K, M, G, T: powers of 1024) or a number
// of bytes (core.ParseSize).
func sizeFlag(name, usage string, def int64) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Usage: usage + " (a size: 512M, 4G, or bytes)", Value: core.FormatSize(def)}
}

// checkSizes refuses a size flag of names that is not a size.
func checkSizes(c *cli.Context, names ...string) error {
	for _, name := range names {
		if _, err := core.ParseSize(c.String(name)); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	return nil
}

// size is the value of size flag name, once checkSizes has passed it.
func size(c *cli.Context, name string) int64 {
	n, _ := core.ParseSize(c.String(name))
	return n
}
