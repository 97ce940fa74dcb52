package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"computerd/computerd/api"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

func TestWorkspaceCommands(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "proj")
	e.write("proj", "a.txt", "one\n")
	e.write("proj", "a.txt", "two\n")

	var list []core.Workspace
	if err := json.Unmarshal([]byte(e.ok("ws", "ls", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "proj" || list[0].Head != 3 {
		t.Fatalf("ws ls: %+v", list)
	}
	e.ok("ws", "fork", "proj", "old", "--rev", "2")
	e.ok("ws", "fork", "proj", "new")
	if got := e.ok("read", "old", "a.txt"); got != "one\n" {
		t.Fatalf("fork at rev 2 reads %q", got)
	}
	if got := e.ok("read", "new", "a.txt"); got != "two\n" {
		t.Fatalf("fork at head reads %q", got)
	}
	e.write("new", "a.txt", "three\n")
	if got := e.ok("read", "proj", "a.txt"); got != "two\n" {
		t.Fatalf("writing a fork changed its source: %q", got)
	}
	if out := e.ok("ws", "ls"); !strings.Contains(out, "old") || !strings.Contains(out, "new") || !strings.Contains(out, "proj") {
		t.Fatalf("ws ls: %s", out)
	}
	e.fails("proj", "already exists", "ws", "create", "proj")
	e.fails("", "workspace name", "ws", "create", "bad/name")
	e.fails("proj", "unknown revision", "ws", "fork", "proj", "x", "--rev", "99")
	e.ok("ws", "rm", "--yes", "old")
	e.fails("", "not found", "ws", "rm", "old")
	e.fails("", "not found", "read", "old", "a.txt")
}

func TestFileTools(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "src/main.go", "package main\n\nfunc main() {\n\tprintln(\"Hello\")\n}\n")
	e.write("w", "src/util/util.go", "package util\n\n// Hello says hello.\nfunc Hello() string { return \"hello\" }\n")
	e.write("w", "README.md", "line1\nline2\nline3\nline4\n")

	// read: whole, line window, old revision.
	if got := e.ok("read", "w", "README.md", "--offset", "2", "--limit", "2"); got != "line2\nline3\n" {
		t.Fatalf("read --offset 2 --limit 2: %q", got)
	}
	if got := e.ok("read", "w", "src/main.go", "--rev", "2"); !strings.HasPrefix(got, "package main") {
		t.Fatalf("read --rev 2: %q", got)
	}
	e.fails("w", "not found", "read", "w", "src/main.go", "--rev", "1")
	e.fails("w", "unknown revision", "read", "w", "README.md", "--rev", "42")
	e.fails("w", "is a directory", "read", "w", "src")

	// ls, stat, find.
	if got := e.ok("ls", "w"); got != "README.md\nsrc/\n" {
		t.Fatalf("ls: %q", got)
	}
	if got := e.ok("ls", "-R", "w", "src"); got != "main.go\nutil/\nutil/util.go\n" {
		t.Fatalf("ls -R src: %q", got)
	}
	var st core.Stat
	if err := json.Unmarshal([]byte(e.ok("stat", "w", "README.md", "--json")), &st); err != nil || st.Size != 24 || st.Mode.Perm() != 0o644 {
		t.Fatalf("stat: %+v %v", st, err)
	}
	if got := e.ok("find", "w", "--name", "*.go"); got != "src/main.go\nsrc/util/util.go\n" {
		t.Fatalf("find *.go: %q", got)
	}
	if got := e.ok("find", "w", "--name", "src/**/util.go"); got != "src/util/util.go\n" {
		t.Fatalf("find src/**/util.go: %q", got)
	}
	if got := e.ok("find", "w", "*", "src", "--type", "d"); got != "src/util\n" {
		t.Fatalf("find -type d: %q", got)
	}

	// grep: -i, -n, context, glob, path, no match.
	if got := e.ok("grep", "w", "hello", "-i", "-n", "--glob", "*.go"); got != "src/main.go:4:\tprintln(\"Hello\")\nsrc/util/util.go:3:// Hello says hello.\nsrc/util/util.go:4:func Hello() string { return \"hello\" }\n" {
		t.Fatalf("grep -i -n: %q", got)
	}
	if got := e.ok("grep", "w", "line3", "-C", "1"); got != "README.md-line2\nREADME.md:line3\nREADME.md-line4\n" {
		t.Fatalf("grep -C 1: %q", got)
	}
	if got := e.ok("grep", "w", "Hello", "src/util"); got != "src/util/util.go:// Hello says hello.\nsrc/util/util.go:func Hello() string { return \"hello\" }\n" {
		t.Fatalf("grep in path: %q", got)
	}
	if got := e.ok("grep", "w", "^func", "--glob", "*.go"); got != "src/main.go:func main() {\nsrc/util/util.go:func Hello() string { return \"hello\" }\n" {
		t.Fatalf("grep ^func: %q", got)
	}
	if _, _, err := e.run(nil, "grep", "w", "nowhere"); err == nil || err.Error() != "exit status 1" {
		t.Fatalf("grep without a match: %v, want exit status 1", err)
	}
	e.fails("w", "bad regular expression", "grep", "w", "(")

	// edit: unique, missing, ambiguous, --all.
	e.ok("edit", "w", "src/main.go", "--old", `println("Hello")`, "--new", `println("Bye")`)
	if got := e.tree("w")["src/main.go"]; !strings.Contains(got, `println("Bye")`) {
		t.Fatalf("edit did not land: %q", got)
	}
	e.fails("w", "not found", "edit", "w", "src/main.go", "--old", "absent", "--new", "x")
	e.fails("w", "matches 4 times", "edit", "w", "README.md", "--old", "line", "--new", "row")
	out := e.ok("edit", "w", "README.md", "--old", "line", "--new", "row", "--all", "--json")
	var er wire.EditResult
	if err := json.Unmarshal([]byte(out), &er); err != nil || er.Replacements != 4 {
		t.Fatalf("edit --all: %s %v", out, err)
	}

	// mkdir, mv, rm.
	e.ok("mkdir", "-p", "w", "a/b/c", "a/d")
	e.fails("w", "already exists", "mkdir", "w", "a/b")
	e.ok("mv", "w", "README.md", "a/b/README.md")
	e.write("w", "x.txt", "x")
	e.fails("w", "already exists", "mv", "w", "x.txt", "a/b/README.md", "--no-clobber")
	e.fails("w", "not empty", "rm", "w", "a")
	e.ok("rm", "-r", "w", "a/b")
	e.fails("w", "not found", "rm", "-r", "w", "a/b")
	e.ok("rm", "w", "x.txt", "a/d")
	want := map[string]string{"src": "dir", "src/util": "dir", "a": "dir",
		"src/main.go": strings.Replace(e.tree("w")["src/main.go"], "", "", 0), "src/util/util.go": e.tree("w")["src/util/util.go"]}
	if got := e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("tree after mkdir/mv/rm: %v", got)
	}

	// log, diff, restore.
	logOut := e.ok("log", "w", "--json")
	var revs []core.Revision
	if err := json.Unmarshal([]byte(logOut), &revs); err != nil {
		t.Fatal(err)
	}
	head := e.head("w")
	if len(revs) != int(head) || revs[0].Rev != head || revs[0].Source != core.SourceAPI || revs[0].Tenant != "alice" {
		t.Fatalf("log: head %d, %+v", head, revs[0])
	}
	if d := e.ok("diff", "w", "4", "5"); !strings.Contains(d, `-	println("Hello")`) || !strings.Contains(d, `+	println("Bye")`) {
		t.Fatalf("diff 4 5:\n%s", d)
	}
	if d := e.ok("diff", "w", "4", "5", "--stat"); !strings.Contains(d, "src/main.go |    2 +-") || !strings.Contains(d, "1 files changed, 1 insertions(+), 1 deletions(-)") {
		t.Fatalf("diff --stat:\n%s", d)
	}
	e.fails("w", "unknown revision", "diff", "w", "1", "99")
	e.ok("restore", "w", "--rev", "4")
	if got := e.tree("w"); got["README.md"] != "line1\nline2\nline3\nline4\n" || got["src/main.go"] == "" || got["a"] != "" {
		t.Fatalf("restore --rev 4: %v", got)
	}
	e.ok("rm", "-r", "w", "src")
	e.ok("restore", "w", "--rev", "2", "src")
	if got := e.tree("w"); got["src/main.go"] == "" || got["src/util/util.go"] != "" {
		t.Fatalf("restore --rev 2 src: %v", got)
	}
	e.fails("w", "unknown revision", "restore", "w", "--rev", "99")
}

func TestAttachExport(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	src := t.TempDir()
	files := map[string]string{"a.txt": "A", "d/b.txt": "B", "d/e/c.bin": "\x00\x01\x02", "empty": ""}
	for p, c := range files {
		mustWrite(t, filepath.Join(src, p), c)
	}
	os.MkdirAll(filepath.Join(src, "emptydir"), 0o755)
	os.Symlink("a.txt", filepath.Join(src, "link"))

	e.ok("attach", "w", src)
	want := map[string]string{"a.txt": "A", "d": "dir", "d/b.txt": "B", "d/e": "dir", "d/e/c.bin": "\x00\x01\x02", "empty": "", "emptydir": "dir", "link": "-> a.txt"}
	if got := e.tree("w"); !reflect.DeepEqual(got, want) {
		t.Fatalf("attach dir: %v", got)
	}
	attachedAt := e.head("w")

	// A git work tree: tracked and unignored files only, no .git.
	repo := t.TempDir()
	mustWrite(t, filepath.Join(repo, "main.go"), "package main\n")
	mustWrite(t, filepath.Join(repo, ".gitignore"), "*.log\n")
	mustWrite(t, filepath.Join(repo, "debug.log"), "noise")
	mustWrite(t, filepath.Join(repo, "new.txt"), "untracked")
	git(t, repo, "init", "-q")
	git(t, repo, "add", "main.go", ".gitignore")
	e.ok("attach", "w", repo)
	if got, want := e.tree("w"), map[string]string{"main.go": "package main\n", ".gitignore": "*.log\n", "new.txt": "untracked"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("attach git repo: %v", got)
	}
	// --merge --into keeps the rest.
	e.ok("attach", "w", src, "--merge", "--into", "vendor/x")
	if got := e.tree("w"); got["main.go"] == "" || got["vendor/x/d/b.txt"] != "B" {
		t.Fatalf("attach --merge --into: %v", got)
	}

	// export of the first attach, as tar and tar.gz, then attach of the archive.
	out := filepath.Join(t.TempDir(), "w.tar.gz")
	e.ok("export", "w", "--rev", fmt.Sprint(attachedAt), "-z", "-o", out)
	dst := t.TempDir()
	if b, err := exec.Command("tar", "xzf", out, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("tar x: %v %s", err, b)
	}
	if got := readDir(t, dst); !reflect.DeepEqual(got, want) {
		t.Fatalf("export --rev %d: %v", attachedAt, got)
	}
	e.ok("ws", "create", "copy")
	e.ok("attach", "copy", out)
	if got := e.tree("copy"); !reflect.DeepEqual(got, want) {
		t.Fatalf("attach of an exported tar.gz: %v", got)
	}

	// A bad archive changes nothing.
	bad := filepath.Join(t.TempDir(), "bad.tar")
	mustWrite(t, bad, strings.Repeat("garbage!", 200))
	e.fails("copy", "bad archive", "attach", "copy", bad)
	evil := filepath.Join(t.TempDir(), "evil.tar")
	if b, err := exec.Command("tar", "cf", evil, "-C", src, "--transform", "s,^,../,", "a.txt").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, b)
	}
	e.fails("copy", "bad path", "attach", "copy", evil)
}

func TestErrors(t *testing.T) {
	e := startWith(t, daemon.Config{Limits: api.Limits{MaxUpload: 1 << 20, MaxJSONBody: 4 << 10}, Quota: fsstore.Quota{MaxWorkspaces: 2}})
	e.ok("ws", "create", "w")
	e.write("w", "f", "data")

	// Tokens.
	e.failsAs("cdt_nonsense", "w", "invalid or revoked token", nil, "read", "w", "f")
	e.failsAs("", "w", "missing bearer token", nil, "ws", "ls")
	// Another tenant sees nothing of alice's and cannot touch it.
	bob := e.newToken("bob")
	e.failsAs(bob, "w", "workspace not found", nil, "read", "w", "f")
	e.failsAs(bob, "w", "workspace not found", strings.NewReader("x"), "write", "w", "f")
	e.failsAs(bob, "w", "workspace not found", nil, "ws", "rm", "w")
	if out, _, err := e.runAs(bob, nil, "ws", "ls", "--json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("bob's ws ls: %q %v", out, err)
	}
	// Bob may use the same name for his own workspace.
	if _, _, err := e.runAs(bob, nil, "ws", "create", "w"); err != nil {
		t.Fatal(err)
	}
	// Bad paths.
	e.fails("w", "invalid path", "write", "w", "../escape")
	e.fails("w", "invalid path", "read", "w", strings.Repeat("n", 256))
	e.fails("w", "invalid path", "mkdir", "w", "a/../../b")
	e.fails("w", "not a directory", "write", "w", "f/child")
	// Oversize bodies: a streamed write and a JSON call.
	e.failsAs(e.token, "w", "over the limit", strings.NewReader(strings.Repeat("x", 2<<20)), "write", "w", "big")
	e.fails("w", "over the limit", "edit", "w", "f", "--old", "data", "--new", strings.Repeat("y", 8<<10))
	if _, ok := e.tree("w")["big"]; ok {
		t.Fatal("oversize write left a file")
	}
	// Workspace limit.
	e.ok("ws", "create", "second")
	e.fails("w", "its quota is 2", "ws", "create", "third")
	e.fails("w", "its quota is 2", "ws", "fork", "w", "third")
	// A write based on a stale revision conflicts and keeps the head's version.
	base := e.head("w")
	e.write("w", "f", "newer")
	e.failsAs(e.token, "w", "conflict", strings.NewReader("stale"), "write", "w", "f", "--base", fmt.Sprint(base))
	if got := e.tree("w")["f"]; got != "newer" {
		t.Fatalf("conflicting write changed f to %q", got)
	}
	// Unknown routes and raw HTTP errors carry JSON bodies.
	req, _ := http.NewRequest("GET", e.d.URL()+"/v1/nothing", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body wire.Error
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || body.Code != wire.CodeNotFound {
		t.Fatalf("unknown route: %d %+v", resp.StatusCode, body)
	}
}

func TestMetrics(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.fails("w", "not found", "read", "w", "missing")
	e.write("w", "f", "hello")
	e.failsAs("cdt_bad", "w", "invalid", nil, "ws", "ls")
	resp, err := http.Get(e.d.MetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, name := range []string{`computerd_data_disk_bytes{kind="size"}`, `computerd_data_disk_bytes{kind="free"}`} {
		if v := metric(t, e.d.MetricsURL(), name); v <= 0 {
			t.Errorf("%s = %v", name, v)
		}
	}
	for _, want := range []string{
		`computerd_http_requests_total{code="200",method="PUT",route="PUT /v1/workspaces/{ws}/files/{path...}"} 1`,
		`computerd_http_errors_total{code="not_found"} 1`,
		`computerd_http_unauthenticated_total 1`, // by no route: see TestUnauthenticatedRequestsAddNoSeries
		`computerd_http_request_duration_seconds_count{method="POST",route="POST /v1/workspaces"} 1`,
		`computerd_revisions_committed_total{source="api"} 1`,
		`computerd_workspaces 1`,
		`computerd_store_chunks 1`,
		`computerd_store_bytes{kind="logical"} 5`,
		`go_goroutines`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q in:\n%s", want, text)
		}
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v %s", args, err, b)
	}
}

// readDir reads a local tree in the form env.tree returns.
func readDir(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var paths []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		paths = append(paths, rel)
		switch {
		case fi.IsDir():
			out[rel] = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	sort.Strings(paths)
	return out
}
