package fsstore

import (
	"fmt"
	"io"
	"strings"
)

// WriteStat prints a per-file summary of changes like `git diff --stat`.
func WriteStat(w io.Writer, files []FileChange) {
	name := func(f FileChange) string {
		if f.From != "" {
			return f.From + " => " + f.Path
		}
		return f.Path
	}
	width := 0
	for _, f := range files {
		width = max(width, len(name(f)))
	}
	added, deleted := 0, 0
	for _, f := range files {
		if f.Binary {
			fmt.Fprintf(w, " %-*s | Bin (%s)\n", width, name(f), f.Status)
			continue
		}
		added += f.Added
		deleted += f.Deleted
		bar := strings.Repeat("+", min(f.Added, 40)) + strings.Repeat("-", min(f.Deleted, 40))
		fmt.Fprintf(w, " %-*s | %4d %s\n", width, name(f), f.Added+f.Deleted, bar)
	}
	fmt.Fprintf(w, " %d files changed, %d insertions(+), %d deletions(-)\n", len(files), added, deleted)
}
