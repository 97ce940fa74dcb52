// Package treetest describes file trees, on disk and in a store, as text
// that tests compare, so a difference reads as the entries that differ.
package treetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

func describe(mode fs.FileMode, nlink uint64, target string, rdev uint64, content []byte) string {
	switch typ := mode.Type(); {
	case mode.IsDir():
		return fmt.Sprintf("dir %o", mode.Perm())
	case typ == fs.ModeSymlink:
		return "symlink " + target
	case typ == fs.ModeNamedPipe:
		return fmt.Sprintf("fifo %o n%d", mode.Perm(), nlink)
	case typ == fs.ModeSocket:
		return fmt.Sprintf("socket %o n%d", mode.Perm(), nlink)
	case typ&fs.ModeDevice != 0:
		return fmt.Sprintf("device %v n%d %d:%d", mode, nlink, core.DevMajor(rdev), core.DevMinor(rdev))
	}
	return fmt.Sprintf("file %o n%d %d %x", mode.Perm(), nlink, len(content), sha256.Sum256(content))
}

// Dir describes the tree under root, one sorted line per entry: path,
// type, permissions, link count, size and SHA-256 of contents, symlink
// target, device number.
func Dir(t testing.TB, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		var target string
		var content []byte
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			content, err = os.ReadFile(p)
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		sys := fi.Sys().(*syscall.Stat_t)
		lines = append(lines, rel+" "+describe(fi.Mode(), sys.Nlink, target, sys.Rdev, content))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Store describes the head of workspace ws as Dir describes a directory.
func Store(t testing.TB, st *fsstore.Store, ws int64) string {
	t.Helper()
	sn, err := st.Snapshot(context.Background(), ws, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	err = sn.ReadTree(context.Background(), "", func(p string, s core.Stat, r io.Reader) error {
		if p == "" {
			return nil
		}
		var content []byte
		if r != nil {
			var err error
			if content, err = io.ReadAll(r); err != nil {
				return err
			}
		}
		lines = append(lines, p+" "+describe(s.Mode, uint64(s.Nlink), s.Target, s.Rdev, content))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Diff lists the lines only got has (+) and only want has (-).
func Diff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b bytes.Buffer
	gs, ws := map[string]bool{}, map[string]bool{}
	for _, l := range g {
		gs[l] = true
	}
	for _, l := range w {
		ws[l] = true
	}
	for _, l := range g {
		if !ws[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	for _, l := range w {
		if !gs[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}
