package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentcmd "computerd/agentctl/command"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/wire"
)

// Nothing of a deleted workspace reaches the tenant whose workspace is
// made next: not its journal (argv, keys, output), not its agent runs,
// not its files through the exec view the kernel caches, and no file it
// planted runs in the next one's commands. And the other way: nothing
// the next tenant does reaches what the first one keeps.
func TestDeletedWorkspaceReachesNoOne(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	e := start(t, api.Limits{})
	bob := e.newToken("bob")
	alice := client.New(e.d.URL(), e.token)

	e.ok("ws", "create", "w")
	old, err := alice.Workspace(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	e.write("w", "secret.txt", "alice's secret\n")
	e.write("w", "Makefile", "all:\n\techo planted > /workspace/planted\n")
	out, _, code := e.exec("w", "--key", "alice-key", "--", "sh", "-c", "cat /workspace/secret.txt; touch /workspace/w")
	if code != 0 || out != "alice's secret\n" {
		t.Fatalf("alice's exec: %q, status %d", out, code)
	}
	execs := e.journal(e.token, "w")
	if len(execs) != 1 {
		t.Fatalf("alice's journal: %+v", execs)
	}
	aliceExec := execs[0].ID
	logs := outputLogs(t, e.dir, aliceExec)
	if len(logs) != 1 {
		t.Fatalf("output logs of %s: %v, want one", aliceExec, logs)
	}
	run, err := alice.CreateRun(ctx, "w", wire.CreateRun{Task: "alice's secret task", Driver: "d"})
	if err != nil {
		t.Fatal(err)
	}
	e.ok("ws", "rm", "--yes", "w")
	if left := outputLogs(t, e.dir, aliceExec); len(left) != 0 {
		t.Errorf("output log of a deleted workspace's exec still on disk: %v", left)
	}

	// Bob's new workspace: another id, an empty journal and no runs.
	if _, _, err := e.runAs(bob, nil, "ws", "create", "b1"); err != nil {
		t.Fatal(err)
	}
	if _, errs, err := e.runAs(bob, strings.NewReader("bob's\n"), "write", "b1", "mine.txt"); err != nil {
		t.Fatalf("bob's write: %v %s", err, errs)
	}
	bc := client.New(e.d.URL(), bob)
	b1, err := bc.Workspace(ctx, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if b1.ID == old.ID {
		t.Fatalf("bob's new workspace got id %d of alice's deleted one", b1.ID)
	}
	if list := e.journal(bob, "b1"); len(list) != 0 {
		t.Fatalf("bob's new workspace lists execs: %+v", list)
	}
	if out, errs, err := e.runAs(bob, nil, "execs", "b1"); err != nil || strings.Contains(out, aliceExec) || strings.Contains(out, "secret") {
		t.Fatalf("agentctl execs b1: %q %v %s", out, err, errs)
	}
	if runs, err := bc.Runs(ctx, "b1", 0); err != nil || len(runs) != 0 {
		t.Fatalf("bob's new workspace lists runs: %+v %v", runs, err)
	}
	for _, path := range []string{"/v1/workspaces/b1/execs/" + aliceExec, "/v1/workspaces/b1/execs/" + aliceExec + "/events", "/v1/runs/" + run.ID} {
		if code, body := httpGet(t, e.d.URL()+path, bob); code != http.StatusNotFound || strings.Contains(body, "secret") {
			t.Errorf("GET %s as bob: %d %s, want 404", path, code, body)
		}
	}
	// Alice's own run and exec went with her workspace.
	if _, err := alice.Run(ctx, run.ID); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("alice's run of a deleted workspace: %v, want not found", err)
	}

	// Bob's exec sees only his own tree; alice's Makefile does not run.
	out, _, code = e.runExecAs(bob, "b1", "sh", "-c", "ls -A /workspace; cat /workspace/secret.txt; make -C /workspace")
	if strings.Contains(out, "secret") || strings.Contains(out, "Makefile") || strings.Contains(out, "planted") || code == 0 {
		t.Fatalf("bob's exec saw alice's deleted workspace: %q, status %d", out, code)
	}
	if !strings.Contains(out, "mine.txt") {
		t.Fatalf("bob's exec: %q, want his mine.txt listed", out)
	}
	sn, err := e.d.Store.Snapshot(ctx, b1.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sn.ReadFile(ctx, "planted"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a file planted by a deleted workspace's Makefile in bob's: %v", err)
	}

	// And back: alice makes a workspace again; bob's exec and run are not hers.
	if _, err := bc.CreateRun(ctx, "b1", wire.CreateRun{Task: "bob's task", Driver: "d"}); err != nil {
		t.Fatal(err)
	}
	e.ok("ws", "create", "w")
	if list := e.journal(e.token, "w"); len(list) != 0 {
		t.Fatalf("alice's new workspace lists execs: %+v", list)
	}
	if runs, err := alice.Runs(ctx, "w", 0); err != nil || len(runs) != 0 {
		t.Fatalf("alice's new workspace lists runs: %+v %v", runs, err)
	}
}

// Deleting a workspace while a command runs in it ends the command, and
// leaves nothing behind: no record, no draft, no layer, no output log.
func TestDeleteWorkspaceWhileExecRuns(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo up; echo x > /workspace/partial; sleep 60"}}, func(ev wire.ExecEvent) error {
			if ev.Type == "output" {
				select {
				case started <- ev.Data:
				default:
				}
			}
			return nil
		})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not start")
	}
	list := e.journal(e.token, "w")
	if len(list) != 1 {
		t.Fatalf("journal: %+v", list)
	}
	begin := time.Now()
	e.ok("ws", "rm", "--yes", "w")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the exec of a deleted workspace ran on")
	}
	t.Logf("exec ended %v after its workspace was deleted", time.Since(begin).Round(time.Millisecond))
	// The runner lets go of the layer once the answer is out.
	deadline := time.Now().Add(10 * time.Second)
	for {
		drafts, err := e.d.Store.Drafts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		logs := outputLogs(t, e.dir, list[0].ID)
		layers, _ := os.ReadDir(filepath.Join(e.dir, "run", "layers"))
		if len(drafts) == 0 && len(logs) == 0 && len(layers) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: drafts %+v, output logs %v, layers %d", drafts, logs, len(layers))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := e.d.Store.ExecByID(ctx, list[0].ID); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("record of a deleted workspace's exec: %v", err)
	}
}

// runExecAs runs agentctl exec as token and returns stdout and the exit status.
func (e *env) runExecAs(token, ws string, argv ...string) (string, string, int) {
	e.t.Helper()
	out, errs, err := e.runAs(token, nil, append([]string{"exec", ws, "--"}, argv...)...)
	var ee *agentcmd.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("agentctl exec %s: %v (%s)", ws, err, errs)
	}
	return out, errs, agentcmd.ExitStatus(err)
}

// outputLogs finds the output log files of exec id under the data directory.
func outputLogs(t *testing.T, dir, id string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), id) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// httpGet sends a GET with token and returns the status and body.
func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	var raw json.RawMessage
	json.NewDecoder(resp.Body).Decode(&raw)
	b.Write(raw)
	return resp.StatusCode, b.String()
}

// A command can make a file of any length that holds nearly nothing; its
// commit costs the file's data, not its length.
func TestExecHugeSparseFile(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	begin := time.Now()
	_, errs, code := e.exec("w", "--shell", "truncate -s 1T /workspace/big && printf end | dd of=/workspace/big bs=1 seek=1099511627000 conv=notrunc 2>/dev/null")
	took := time.Since(begin)
	if code != 0 {
		t.Fatalf("exec: status %d %s", code, errs)
	}
	t.Logf("exec making a 1 TiB sparse file committed in %v", took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("the commit of a 1 TiB sparse file took %v", took)
	}
	w, err := e.d.Store.Workspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	sn, err := e.d.Store.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sn.Open(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := f.ReadAt(buf, 1099511627000); err != nil || string(buf) != "end" || f.Size() != 1<<40 {
		t.Fatalf("big: size %d, tail %q %v", f.Size(), buf, err)
	}
}

// Writes that make the same missing directory at once all land: the
// parents are made in each commit's own transaction (mkdir -p).
func TestConcurrentWritesMakeOneParent(t *testing.T) {
	ctx := context.Background()
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := cl.Write(ctx, "w", fmt.Sprintf("new/dir/f%d", i), strings.NewReader("x"), client.WriteOptions{})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a write into a directory another write made meanwhile: %v", err)
		}
	}
	if tree := e.tree("w"); len(tree) != n+2 {
		t.Fatalf("tree after %d writes into new/dir: %d entries: %v", n, len(tree), tree)
	}
	// A file in the way is still an error.
	e.write("w", "file", "x")
	if _, err := cl.Write(ctx, "w", "file/under", strings.NewReader("x"), client.WriteOptions{}); !errors.Is(err, core.ErrNotDir) {
		t.Fatalf("a write beneath a file: %v, want not a directory", err)
	}
}
