package core

import (
	"fmt"
	"io"
	"strings"
)

// FileChange summarises how one path differs between two revisions.
type FileChange struct {
	Path    string `json:"path"`
	From    string `json:"from,omitempty"` // old path of a rename
	Status  string `json:"status"`         // added, deleted, modified, renamed
	Added   int    `json:"added"`          // lines
	Deleted int    `json:"deleted"`        // lines
	Binary  bool   `json:"binary,omitempty"`
}

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
