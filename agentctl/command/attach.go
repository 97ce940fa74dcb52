package command

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"computerd/client"
)

// attach uploads SRC (a directory, a tarball, or a git work tree) as one revision.
func attach(c *cli.Context) error {
	ws, src := c.Args().Get(0), c.Args().Get(1)
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	// The bar counts what it can know the total of: a tarball's bytes,
	// or the bytes of a directory's files (a tar stream's size depends
	// on the headers its writer chooses for each entry).
	var bar *progress
	counted := io.Discard // what the bar counts goes here
	showBar := c.Bool("progress") || isTerminal(c.App.ErrWriter)
	var archive io.Reader
	var files []string
	switch {
	case fi.Mode().IsRegular():
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		archive = f
		if showBar {
			bar = newProgress(c.App.ErrWriter, "attach", fi.Size())
			archive = io.TeeReader(f, bar)
		}
	case fi.IsDir():
		if isGitWorkTree(src) && !c.Bool("no-git") {
			if files, err = gitFiles(c.Context, src); err != nil {
				return err
			}
		} else if files, err = dirFiles(src); err != nil {
			return err
		}
		if showBar {
			total, err := contentSize(src, files)
			if err != nil {
				return err
			}
			bar = newProgress(c.App.ErrWriter, "attach", total)
			counted = bar
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, src, files, counted)) }()
		defer pr.Close()
		archive = pr
	default:
		return fmt.Errorf("attach %s: not a directory or a tarball", src)
	}
	res, err := clientOf(c).Attach(c.Context, ws, archive, client.AttachOptions{Into: c.String("into"), Merge: c.Bool("merge")})
	bar.done()
	if err != nil {
		return err
	}
	return output(c, res, func(w io.Writer) {
		fmt.Fprintf(w, "attached %d files (%s) as revision %d\n", res.Files, humanBytes(res.Bytes), res.Revision.Rev)
	})
}

// isGitWorkTree reports whether dir is the top of a git work tree.
func isGitWorkTree(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".git"))
	return err == nil
}

// gitFiles lists what git would commit: tracked files plus untracked ones
// that are not ignored, relative to dir. Files deleted from the work tree
// but still tracked are skipped.
func gitFiles(ctx context.Context, dir string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %v: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	seen := map[string]bool{}
	var files []string
	for _, name := range strings.Split(string(out), "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			continue
		}
		files = append(files, name)
	}
	return files, nil
}

// dirFiles lists every entry under dir (directories included, so empty
// ones are kept), relative to dir, parents first.
func dirFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, err
}

// contentSize is the bytes of the regular files among files (relative
// to dir): what writeTar copies into the stream besides headers.
func contentSize(dir string, files []string) (int64, error) {
	var n int64
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join(dir, f))
		if err != nil {
			return 0, err
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n, nil
}

// writeTar writes files (relative to dir) as a tar stream, and the bytes
// of the files' contents to counted as they are read; parent directories
// not listed are created by the server.
func writeTar(w io.Writer, dir string, files []string, counted io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	for _, name := range files {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			continue // tar has no type for sockets (GNU tar skips them too)
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Format = tar.FormatPAX
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, io.TeeReader(f, counted), hdr.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// export writes a tar archive of the workspace.
func export(c *cli.Context) error {
	if jsonOn(c) && c.String("output") == "" {
		return fmt.Errorf("export --json needs --output FILE: the archive goes there and a summary to stdout")
	}
	if c.String("output") == "" && isTerminal(c.App.Writer) {
		return &usageError{"export writes a tar archive and stdout is a terminal: redirect it (agentctl export " +
			c.Args().First() + " > archive.tar) or give --output FILE"}
	}
	body, err := clientOf(c).Export(c.Context, c.Args().First(), client.ExportOptions{
		Rev: c.Int64("rev"), Path: c.String("path"), Gzip: c.Bool("gzip"),
	})
	if err != nil {
		return err
	}
	defer body.Close()
	out := c.App.Writer
	if o := c.String("output"); o != "" {
		f, err := os.Create(o)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	var bar *progress
	if c.String("output") != "" && isTerminal(c.App.ErrWriter) {
		bar = newProgress(c.App.ErrWriter, "export", 0)
		out = io.MultiWriter(out, bar)
	}
	n, err := io.Copy(out, body)
	bar.done()
	if err != nil || !jsonOn(c) {
		return err
	}
	return output(c, map[string]any{"output": c.String("output"), "bytes": n}, nil)
}

// progress draws a one-line progress bar, at most ten times a second.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	total int64
	n     int64
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer, label string, total int64) *progress {
	return &progress{w: w, label: label, total: total, start: time.Now()}
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += int64(len(b))
	if time.Since(p.last) >= 100*time.Millisecond {
		p.draw()
		p.last = time.Now()
	}
	return len(b), nil
}

func (p *progress) draw() {
	rate := float64(p.n) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.total <= 0 {
		fmt.Fprintf(p.w, "\r%s: %s  %s/s   ", p.label, humanBytes(p.n), humanBytes(int64(rate)))
		return
	}
	frac := min(float64(p.n)/float64(p.total), 1)
	const width = 30
	fill := int(frac * width)
	fmt.Fprintf(p.w, "\r%s: [%s%s] %3.0f%%  %s / %s  %s/s   ", p.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		frac*100, humanBytes(p.n), humanBytes(p.total), humanBytes(int64(rate)))
}

// done draws the final state and ends the line (a nil bar does nothing).
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw()
	fmt.Fprintln(p.w)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
