package fsstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"computerd/core"
)

// maxTextDiff is the largest file, in bytes, shown line by line in a text diff.
const maxTextDiff = 4 << 20

// fileChange is a FileChange with what WriteDiff needs besides.
type fileChange struct {
	core.FileChange
	oldText, newText []byte
	oldMode, newMode string
}

// DiffFiles lists the files (and symlinks) that differ between two
// revisions, with line counts, sorted by path. Directories are left out.
func (s *Store) DiffFiles(ctx context.Context, ws int64, from, to int64) ([]core.FileChange, error) {
	var out []core.FileChange
	return out, s.EachFileChange(ctx, ws, from, to, func(c core.FileChange) error {
		out = append(out, c)
		return nil
	})
}

// EachFileChange calls fn with each file DiffFiles lists, in its order,
// reading the files' texts one change at a time.
func (s *Store) EachFileChange(ctx context.Context, ws int64, from, to int64, fn func(core.FileChange) error) error {
	return s.eachFileChange(ctx, ws, from, to, func(c *fileChange) error { return fn(c.FileChange) })
}

// eachFileChange calls fn with each file change, sorted by path, with
// its texts: only one change's texts are held at a time. The changeset's
// ops are sorted by path through a spill (path, then the op's place in
// the changeset), so the changes of a diff of any size cost a bounded
// amount of memory.
func (s *Store) eachFileChange(ctx context.Context, ws int64, from, to int64, fn func(*fileChange) error) error {
	d, err := s.OpenDiff(ctx, ws, from, to)
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := s.Snapshot(ctx, ws, d.From)
	if err != nil {
		return err
	}
	b, err := s.Snapshot(ctx, ws, d.To)
	if err != nil {
		return err
	}
	// A record: the path, 0 (no path holds it), the op's place (8 bytes),
	// its kind's code, then the path it came from (renames).
	byPath := newSpill(s.Dir)
	defer byPath.close()
	var rec []byte
	var seq uint64
	err = d.Each(func(op core.Op) error {
		switch op.Kind {
		case core.OpDelete, core.OpRename, core.OpCreate, core.OpSymlink, core.OpMknod, core.OpLink,
			core.OpWrite, core.OpTruncate, core.OpChmod:
		default:
			return nil
		}
		rec = append(append(rec[:0], op.Path...), 0)
		rec = binary.BigEndian.AppendUint64(rec, seq)
		seq++
		rec = append(rec, packedCode[op.Kind])
		rec = append(rec, op.From...)
		return byPath.add(rec)
	})
	if err != nil {
		return err
	}
	var c *fileChange
	err = byPath.each(func(r []byte) error {
		i := bytes.IndexByte(r, 0)
		p := r[:i]
		kind, from := packedKinds[r[i+9]], string(r[i+10:])
		if c != nil && c.Path != string(p) {
			if err := s.fileChange(ctx, a, b, c, fn); err != nil {
				return err
			}
			c = nil
		}
		if c == nil {
			c = &fileChange{FileChange: core.FileChange{Path: string(p)}}
		}
		note := func(from, status string) {
			if c.Status == "" || status != "modified" || c.Status == "deleted" {
				c.Status = status
			}
			if from != "" {
				c.From = from
			}
		}
		switch kind {
		case core.OpDelete:
			note("", "deleted")
		case core.OpRename:
			note(from, "renamed")
		case core.OpCreate, core.OpSymlink, core.OpMknod, core.OpLink:
			if c.Status == "deleted" {
				c.Status = "modified"
			} else {
				note("", "added")
			}
		default:
			note("", "modified")
		}
		return nil
	})
	if err == nil && c != nil {
		err = s.fileChange(ctx, a, b, c, fn)
	}
	return err
}

// fileChange reads the texts of one change c between a and b, counts its
// lines and calls fn with it, unless it is a directory's or changed only
// in time.
func (s *Store) fileChange(ctx context.Context, a, b *Snapshot, c *fileChange, fn func(*fileChange) error) error {
	oldPath := c.Path
	if c.From != "" {
		oldPath = c.From
	}
	var isDir bool
	var err error
	if c.Status != "added" {
		if c.oldText, c.oldMode, isDir, err = textOf(ctx, a, oldPath); err != nil {
			return err
		}
	}
	if c.Status != "deleted" {
		if c.newText, c.newMode, isDir, err = textOf(ctx, b, c.Path); err != nil {
			return err
		}
	}
	if isDir {
		return nil
	}
	if c.Status == "modified" && bytes.Equal(c.oldText, c.newText) && c.oldMode == c.newMode {
		return nil // only the time changed
	}
	if c.oldText == nil && c.Status != "added" || c.newText == nil && c.Status != "deleted" ||
		bytes.IndexByte(c.oldText, 0) >= 0 || bytes.IndexByte(c.newText, 0) >= 0 {
		c.Binary = true
	} else {
		for _, e := range diffLines(splitLines(c.oldText), splitLines(c.newText)) {
			switch e.kind {
			case '+':
				c.Added++
			case '-':
				c.Deleted++
			}
		}
	}
	return fn(c)
}

// textOf reads a file or symlink for diffing: nil text if it is too big.
func textOf(ctx context.Context, sn *Snapshot, p string) (text []byte, mode string, isDir bool, err error) {
	st, err := sn.Stat(ctx, p)
	if err != nil {
		return nil, "", false, err
	}
	mode = fmt.Sprintf("%06o", UnixMode(st.Mode))
	switch {
	case st.IsDir():
		return nil, mode, true, nil
	case st.Target != "":
		return []byte(st.Target), mode, false, nil
	case core.IsSpecial(st.Mode), st.Size > maxTextDiff:
		return nil, mode, false, nil
	}
	text, err = sn.ReadFile(ctx, p)
	if text == nil {
		text = []byte{}
	}
	return text, mode, false, err
}

// WriteDiff writes a unified diff (git style, three lines of context)
// between two revisions to w.
func (s *Store) WriteDiff(ctx context.Context, w io.Writer, ws int64, from, to int64) error {
	return s.eachFileChange(ctx, ws, from, to, func(c *fileChange) error {
		oldPath, newPath := "a/"+c.Path, "b/"+c.Path
		if c.From != "" {
			oldPath = "a/" + c.From
		}
		if _, err := fmt.Fprintf(w, "diff --git %s %s\n", oldPath, newPath); err != nil {
			return err // the reader went away
		}
		switch c.Status {
		case "added":
			fmt.Fprintf(w, "new file mode %s\n", c.newMode)
			oldPath = "/dev/null"
		case "deleted":
			fmt.Fprintf(w, "deleted file mode %s\n", c.oldMode)
			newPath = "/dev/null"
		case "renamed":
			fmt.Fprintf(w, "rename from %s\nrename to %s\n", c.From, c.Path)
		}
		if c.Status != "added" && c.Status != "deleted" && c.oldMode != c.newMode {
			fmt.Fprintf(w, "old mode %s\nnew mode %s\n", c.oldMode, c.newMode)
		}
		if c.Binary {
			_, err := fmt.Fprintf(w, "Binary files %s and %s differ\n", oldPath, newPath)
			return err
		}
		if bytes.Equal(c.oldText, c.newText) {
			return nil
		}
		fmt.Fprintf(w, "--- %s\n+++ %s\n", oldPath, newPath)
		writeHunks(w, splitLines(c.oldText), splitLines(c.newText), 3)
		return nil
	})
}

// splitLines splits text into lines, each keeping its newline.
func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// edit is one line of a line diff: ' ' kept, '-' deleted, '+' added.
type edit struct {
	kind byte
	line string
}

// diffLines computes a shortest edit script with Myers' O(ND) algorithm.
func diffLines(a, b []string) []edit {
	// Trim the common prefix and suffix; most edits are small.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []edit
	for _, l := range a[:pre] {
		out = append(out, edit{' ', l})
	}
	out = append(out, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		out = append(out, edit{' ', l})
	}
	return out
}

// maxEditDistance bounds the work (and memory, quadratic in it) of one line diff.
const maxEditDistance = 4000

func myers(a, b []string) []edit {
	n, m := len(a), len(b)
	maxD := n + m
	if maxD == 0 {
		return nil
	}
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int // trace[d] holds v[-d-1 .. d+1] before round d
	for d := 0; d <= maxD; d++ {
		if d > maxEditDistance {
			// Too different to be worth a minimal script: replace wholesale.
			out := make([]edit, 0, n+m)
			for _, l := range a {
				out = append(out, edit{'-', l})
			}
			for _, l := range b {
				out = append(out, edit{'+', l})
			}
			return out
		}
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(a, b, trace, d)
			}
		}
	}
	return nil
}

func backtrack(a, b []string, trace [][]int, d int) []edit {
	var rev []edit
	x, y := len(a), len(b)
	for ; d > 0; d-- {
		v, off := trace[d], d+1
		k := x - y
		var pk int
		if k == -d || k != d && v[off+k-1] < v[off+k+1] {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := v[off+pk]
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, edit{' ', a[x]})
		}
		if x == px {
			y--
			rev = append(rev, edit{'+', b[y]})
		} else {
			x--
			rev = append(rev, edit{'-', a[x]})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, edit{' ', a[x]})
	}
	out := make([]edit, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

// writeHunks prints the edit script as unified-diff hunks.
func writeHunks(w io.Writer, a, b []string, context int) {
	es := diffLines(a, b)
	for i := 0; i < len(es); {
		// find the next change
		for i < len(es) && es[i].kind == ' ' {
			i++
		}
		if i == len(es) {
			return
		}
		start := max(0, i-context)
		end := i
		for end < len(es) {
			if es[end].kind != ' ' {
				end++
				continue
			}
			// a run of kept lines: does another change follow within 2*context?
			run := end
			for run < len(es) && es[run].kind == ' ' {
				run++
			}
			if run == len(es) || run-end > 2*context {
				end = min(end+context, len(es))
				break
			}
			end = run
		}
		// line numbers of the hunk start
		oldLine, newLine := 1, 1
		for _, e := range es[:start] {
			if e.kind != '+' {
				oldLine++
			}
			if e.kind != '-' {
				newLine++
			}
		}
		oldN, newN := 0, 0
		for _, e := range es[start:end] {
			if e.kind != '+' {
				oldN++
			}
			if e.kind != '-' {
				newN++
			}
		}
		if oldN == 0 {
			oldLine--
		}
		if newN == 0 {
			newLine--
		}
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(oldLine, oldN), hunkRange(newLine, newN))
		for _, e := range es[start:end] {
			fmt.Fprintf(w, "%c%s", e.kind, e.line)
			if !strings.HasSuffix(e.line, "\n") {
				fmt.Fprint(w, "\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
}

func hunkRange(start, n int) string {
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
