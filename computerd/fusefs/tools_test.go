package fusefs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// run runs a command in dir and returns its output, failing the test on error.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GOCACHE="+filepath.Join(home, "gocache"), "GOPATH="+filepath.Join(home, "gopath"), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func need(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func TestGit(t *testing.T) {
	need(t, "git")
	st, w, m, dir := mount(t)
	run(t, dir, "git", "init", "-q", "-b", "main")
	mustWrite(t, filepath.Join(dir, "a.txt"), "one\n")
	os.MkdirAll(filepath.Join(dir, "src/pkg"), 0o755)
	mustWrite(t, filepath.Join(dir, "src/pkg/b.go"), "package pkg\n")
	run(t, dir, "git", "add", "-A")
	run(t, dir, "git", "commit", "-q", "-m", "first")
	if out := run(t, dir, "git", "status", "--porcelain"); out != "" {
		t.Fatalf("status after commit: %q", out)
	}
	run(t, dir, "git", "checkout", "-q", "-b", "side")
	mustWrite(t, filepath.Join(dir, "a.txt"), "two\n")
	run(t, dir, "git", "commit", "-q", "-am", "second")
	run(t, dir, "git", "checkout", "-q", "main")
	if got := mustRead(t, filepath.Join(dir, "a.txt")); got != "one\n" {
		t.Fatalf("a.txt on main = %q", got)
	}
	commit(t, m)
	// The committed tree is a working git repository too.
	out := t.TempDir()
	sn, _ := st.Snapshot(bg, w.ID, 0)
	if err := exportTo(sn, out); err != nil {
		t.Fatal(err)
	}
	if got := run(t, out, "git", "log", "--format=%s", "side"); got != "second\nfirst\n" {
		t.Fatalf("git log of the committed tree: %q", got)
	}
	if s := run(t, out, "git", "status", "--porcelain"); s != "" {
		t.Fatalf("committed tree status %q", s)
	}
}

func TestTar(t *testing.T) {
	need(t, "tar")
	st, w, m, dir := mount(t)
	src := filepath.Join(runtime.GOROOT(), "src", "archive")
	tarball := filepath.Join(t.TempDir(), "a.tar")
	run(t, "", "tar", "-C", filepath.Dir(src), "-cf", tarball, "archive")
	run(t, dir, "tar", "-xf", tarball)
	run(t, "", "diff", "-r", src, filepath.Join(dir, "archive"))
	commit(t, m)
	out := t.TempDir()
	sn, _ := st.Snapshot(bg, w.ID, 0)
	if err := exportTo(sn, out); err != nil {
		t.Fatal(err)
	}
	run(t, "", "diff", "-r", src, filepath.Join(out, "archive"))
}

func TestGoBuild(t *testing.T) {
	need(t, "go")
	_, _, m, dir := mount(t)
	mustWrite(t, filepath.Join(dir, "go.mod"), "module example.com/hello\n\ngo 1.21\n")
	os.Mkdir(filepath.Join(dir, "greet"), 0o755)
	mustWrite(t, filepath.Join(dir, "greet/greet.go"), "package greet\n\nfunc Hello() string { return \"hello from the mount\" }\n")
	mustWrite(t, filepath.Join(dir, "main.go"), "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/hello/greet\"\n)\n\nfunc main() { fmt.Println(greet.Hello()) }\n")
	run(t, dir, "go", "build", "-o", "hello", ".")
	if out := run(t, dir, "./hello"); out != "hello from the mount\n" {
		t.Fatalf("./hello printed %q", out)
	}
	commit(t, m)
	if out := run(t, dir, "./hello"); out != "hello from the mount\n" {
		t.Fatalf("./hello after commit printed %q", out)
	}
}

func TestSQLiteDatabase(t *testing.T) {
	need(t, "python3")
	st, w, m, dir := mount(t)
	script := `
import os, sqlite3
db = sqlite3.connect("t.db")
db.execute("PRAGMA journal_mode=DELETE")
db.execute("CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)")
with db:
    db.executemany("INSERT INTO kv VALUES (?, ?)", [(i, "v%d" % i * 20) for i in range(5000)])
with db:
    db.execute("DELETE FROM kv WHERE k % 3 = 0")
db.close()
# Write a new file, fsync it and rename it into place, as careful tools do.
with open("cfg.tmp", "w") as f:
    f.write("setting=1\n")
    f.flush()
    os.fsync(f.fileno())
os.rename("cfg.tmp", "cfg")
fd = os.open(".", os.O_RDONLY)
os.fsync(fd)
os.close(fd)
db = sqlite3.connect("t.db")
print(db.execute("SELECT count(*), sum(length(v)) FROM kv").fetchone()[0])
print(db.execute("PRAGMA integrity_check").fetchone()[0])
`
	out := run(t, dir, "python3", "-c", script)
	if out != "3333\nok\n" {
		t.Fatalf("python printed %q", out)
	}
	if got, _ := storeFile(t, st, w.ID, "cfg"); got != "setting=1\n" {
		t.Fatalf("cfg after fsync+rename+fsync(dir): %q", got)
	}
	commit(t, m)
	exp := t.TempDir()
	sn, _ := st.Snapshot(bg, w.ID, 0)
	if err := exportTo(sn, exp); err != nil {
		t.Fatal(err)
	}
	if out := run(t, exp, "python3", "-c", `import sqlite3; db = sqlite3.connect("t.db"); print(db.execute("SELECT count(*) FROM kv").fetchone()[0]); print(db.execute("PRAGMA integrity_check").fetchone()[0])`); out != "3333\nok\n" {
		t.Fatalf("committed database: %q", out)
	}
}
