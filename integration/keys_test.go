package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/tools"
	"computerd/wire"
)

// mustHTTP sends one raw request as tenant alice with headers hdr and
// returns the status and body.
func (e *env) mustHTTP(method, path string, hdr map[string]string, body string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.d.URL()+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	if body != "" && strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// keyedRev is the revision of workspace ws (of alice) that holds key, or 0.
func (e *env) keyedRev(ws, key string) int64 {
	e.t.Helper()
	w, err := e.d.Store.Workspace(context.Background(), "alice", ws)
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := e.d.Store.RevisionByKey(context.Background(), w.ID, key)
	if err != nil {
		return 0
	}
	return rev.Rev
}

// apiCommits is computerd_revisions_committed_total{source="api"}.
func (e *env) apiCommits() int {
	e.t.Helper()
	resp, err := http.Get(e.d.MetricsURL())
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, `computerd_revisions_committed_total{source="api"} `); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				e.t.Fatalf("metric line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// A keyed edit applies once: its retry answers the first revision with
// Replayed, whether the key came in the body or the header, and even after
// the file changed meanwhile. An edit with all=true would show a second
// application (every "a" doubled twice).
func TestKeyEdit(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "f", "a a a\n")
	cl := client.New(e.d.URL(), e.token)
	ctx := context.Background()
	head := e.head("w")

	first, err := cl.Edit(ctx, "w", wire.Edit{Path: "f", Old: "a", New: "aa", All: true, Key: "k-body"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || first.Replacements != 3 || first.Revision.Rev != head+1 {
		t.Fatalf("first edit: %+v (head was %d)", first, head)
	}
	again, err := cl.Edit(ctx, "w", wire.Edit{Path: "f", Old: "a", New: "aa", All: true, Key: "k-body"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Revision.Rev != first.Revision.Rev || again.Replacements != 0 {
		t.Errorf("retry: %+v, want replayed revision %d", again, first.Revision.Rev)
	}
	if got, want := e.tree("w")["f"], "aa aa aa\n"; got != want {
		t.Errorf("f %q after a retried edit, want %q (edited once)", got, want)
	}
	if got, want := e.head("w"), head+1; got != want {
		t.Errorf("head %d, want %d", got, want)
	}
	if got := e.keyedRev("w", "k-body"); got != first.Revision.Rev {
		t.Errorf("the key is held by revision %d, want %d", got, first.Revision.Rev)
	}

	// The header works as the body's key does, and a retry after other
	// changes still applies nothing.
	edit := `{"path": "f", "old": "aa", "new": "b", "all": true}`
	status, body := e.mustHTTP("POST", "/v1/workspaces/w/edit", map[string]string{wire.HeaderIdempotencyKey: "k-hdr"}, edit)
	var byHeader wire.EditResult
	if err := json.Unmarshal(body, &byHeader); status != http.StatusOK || err != nil || byHeader.Replayed {
		t.Fatalf("keyed edit by header: %d %s", status, body)
	}
	e.write("w", "g", "meanwhile")
	afterOther := e.head("w")
	status, body = e.mustHTTP("POST", "/v1/workspaces/w/edit", map[string]string{wire.HeaderIdempotencyKey: "k-hdr"}, edit)
	var replay wire.EditResult
	if err := json.Unmarshal(body, &replay); status != http.StatusOK || err != nil || !replay.Replayed || replay.Revision.Rev != byHeader.Revision.Rev {
		t.Fatalf("retry by header after another write: %d %s, want revision %d replayed", status, body, byHeader.Revision.Rev)
	}
	if e.head("w") != afterOther || e.tree("w")["f"] != "b b b\n" {
		t.Errorf("retry by header applied again: head %d (want %d), f %q", e.head("w"), afterOther, e.tree("w")["f"])
	}
	// The same key in body and header is one key.
	status, body = e.mustHTTP("POST", "/v1/workspaces/w/edit", map[string]string{wire.HeaderIdempotencyKey: "k-body"},
		`{"path": "f", "old": "a", "new": "aa", "all": true, "key": "k-body"}`)
	if status != http.StatusOK || !strings.Contains(string(body), `"replayed":true`) {
		t.Errorf("body and header with the same key: %d %s", status, body)
	}

	// A different key applies again.
	next, err := cl.Edit(ctx, "w", wire.Edit{Path: "f", Old: "b", New: "c", All: true, Key: "k-other"})
	if err != nil || next.Replayed || e.tree("w")["f"] != "c c c\n" || next.Revision.Rev != afterOther+1 {
		t.Fatalf("a new key: %+v %v, f %q", next, err, e.tree("w")["f"])
	}

	for _, tc := range []struct {
		name string
		hdr  map[string]string
		body string
		code string
	}{
		{"body and header differ", map[string]string{wire.HeaderIdempotencyKey: "one"},
			`{"path": "f", "old": "c", "new": "d", "key": "two"}`, wire.CodeInvalid},
		{"key too long", nil, `{"path": "f", "old": "c", "new": "d", "all": true, "key": "` + strings.Repeat("k", 300) + `"}`, wire.CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, f := e.head("w"), e.tree("w")["f"]
			status, body := e.mustHTTP("POST", "/v1/workspaces/w/edit", tc.hdr, tc.body)
			var we wire.Error
			json.Unmarshal(body, &we)
			if status != http.StatusBadRequest || we.Code != tc.code {
				t.Errorf("%d %s, want 400 %s", status, body, tc.code)
			}
			if e.head("w") != before || e.tree("w")["f"] != f {
				t.Errorf("a refused edit changed the workspace")
			}
		})
	}

	// A keyed edit that failed recorded nothing: the same key applies once
	// the edit can.
	if _, err := cl.Edit(ctx, "w", wire.Edit{Path: "f", Old: "absent", New: "x", Key: "k-failed"}); err == nil {
		t.Fatal("an edit of an absent string succeeded")
	}
	if got := e.keyedRev("w", "k-failed"); got != 0 {
		t.Fatalf("a failed edit's key is held by revision %d", got)
	}
	e.write("w", "f", "absent\n")
	if res, err := cl.Edit(ctx, "w", wire.Edit{Path: "f", Old: "absent", New: "x", Key: "k-failed"}); err != nil || res.Replayed || e.tree("w")["f"] != "x\n" {
		t.Errorf("the key of a failed edit, used again: %+v %v", res, err)
	}
}

// Retries of one keyed edit racing each other commit it once.
func TestKeyEditRacing(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "f", "x\n")
	cl := client.New(e.d.URL(), e.token)
	head := e.head("w")
	const n = 8
	res := make([]wire.EditResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = cl.Edit(context.Background(), "w", wire.Edit{Path: "f", Old: "x", New: "xx", All: true, Key: "race"})
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("edit %d: %v", i, errs[i])
			continue
		}
		if res[i].Revision.Rev != head+1 {
			t.Errorf("edit %d answered revision %d, want %d", i, res[i].Revision.Rev, head+1)
		}
		if !res[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers say they applied the edit, want 1", fresh)
	}
	if e.head("w") != head+1 || e.tree("w")["f"] != "xx\n" {
		t.Errorf("after %d racing retries: head %d (want %d), f %q", n, e.head("w"), head+1, e.tree("w")["f"])
	}
}

// A keyed write applies once: a retry (even with other bytes) answers the
// first revision; a different key writes again. Keys belong to their
// workspace.
func TestKeyWrite(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.ok("ws", "create", "other")
	cl := client.New(e.d.URL(), e.token)
	ctx := context.Background()
	write := func(ws, content, key string) core.Revision {
		t.Helper()
		rev, err := cl.Write(ctx, ws, "f", strings.NewReader(content), client.WriteOptions{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	first := write("w", "one", "wk")
	head := e.head("w")
	commits := e.apiCommits()
	if again := write("w", "two", "wk"); again.Rev != first.Rev {
		t.Errorf("retry answered revision %d, want %d", again.Rev, first.Rev)
	}
	if e.head("w") != head || e.tree("w")["f"] != "one" {
		t.Errorf("a retried write applied: head %d (want %d), f %q", e.head("w"), head, e.tree("w")["f"])
	}
	if got := e.keyedRev("w", "wk"); got != first.Rev {
		t.Errorf("the key is held by revision %d, want %d", got, first.Rev)
	}
	if got := e.apiCommits(); got != commits {
		t.Errorf("a replayed write counted as a commit: %d revisions committed, want %d", got, commits)
	}
	otherHead := e.head("other")
	if other := write("other", "elsewhere", "wk"); other.Rev != otherHead+1 || e.tree("other")["f"] != "elsewhere" {
		t.Errorf("the same key in another workspace: revision %d (want %d), f %q", other.Rev, otherHead+1, e.tree("other")["f"])
	}
	if next := write("w", "three", "wk2"); next.Rev != head+1 || e.tree("w")["f"] != "three" {
		t.Errorf("a new key: revision %d (want %d), f %q", next.Rev, head+1, e.tree("w")["f"])
	}

	// Racing retries of one keyed write: one revision, counted once.
	head, commits = e.head("w"), e.apiCommits()
	const n = 8
	revs := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rev, err := cl.Write(ctx, "w", "race", bytes.NewReader([]byte{byte('a' + i)}), client.WriteOptions{Key: "race"})
			if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
			revs[i] = rev.Rev
		}()
	}
	wg.Wait()
	for i, r := range revs {
		if r != head+1 {
			t.Errorf("racing write %d answered revision %d, want %d", i, r, head+1)
		}
	}
	if e.head("w") != head+1 {
		t.Errorf("%d racing retries moved the head from %d to %d", n, head, e.head("w"))
	}
	if got := e.apiCommits(); got != commits+1 {
		t.Errorf("%d racing retries counted %d commits, want 1", n, got-commits)
	}
}

// A keyed batch of ops applies once: a retried mkdir is not "exists".
func TestKeyOps(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "f", "x")
	head := e.head("w")
	ops := `{"ops": [{"op": "mkdir", "path": "d", "mode": 493}, {"op": "rename", "from": "f", "path": "d/f"}]}`
	hdr := map[string]string{wire.HeaderIdempotencyKey: "ops-1"}
	var revs []core.Revision
	for i := range 2 {
		status, body := e.mustHTTP("POST", "/v1/workspaces/w/ops", hdr, ops)
		var rev core.Revision
		if err := json.Unmarshal(body, &rev); status != http.StatusOK || err != nil {
			t.Fatalf("ops try %d: %d %s", i, status, body)
		}
		revs = append(revs, rev)
	}
	if revs[0].Rev != head+1 || revs[1].Rev != revs[0].Rev {
		t.Errorf("revisions %d then %d, want %d twice", revs[0].Rev, revs[1].Rev, head+1)
	}
	if got, want := e.tree("w"), map[string]string{"d": "dir", "d/f": "x"}; len(got) != 2 || got["d"] != want["d"] || got["d/f"] != want["d/f"] {
		t.Errorf("tree %v, want %v", got, want)
	}
	if e.head("w") != head+1 || e.keyedRev("w", "ops-1") != head+1 {
		t.Errorf("head %d, key at %d; want both %d", e.head("w"), e.keyedRev("w", "ops-1"), head+1)
	}
	// Without a key the same batch is applied again, and fails.
	if status, body := e.mustHTTP("POST", "/v1/workspaces/w/ops", nil, ops); status != http.StatusConflict {
		t.Errorf("unkeyed repeat: %d %s, want 409 exists", status, body)
	}
}

// A tool call with a key applies once: exec runs its command once (the
// counter file it appends to has one line, the journal one exec), write
// and edit commit once; a different key runs again.
func TestKeyTools(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	set := e.toolSet("w")
	ctx := context.Background()
	call := func(name, args, key string) tools.Result {
		t.Helper()
		res, err := set.Call(ctx, name, tools.Call{Args: json.RawMessage(args), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			t.Fatalf("%s: %+v", name, res)
		}
		return res
	}
	execs := func() int {
		t.Helper()
		list, err := set.Client.Execs(ctx, "w", 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	cmd := `{"command": "echo ran >> count.txt; echo hello"}`
	first := call("exec", cmd, "exec-1")
	head := e.head("w")
	var streamed strings.Builder
	res, err := set.Call(ctx, "exec", tools.Call{Args: json.RawMessage(cmd), Key: "exec-1",
		Output: func(_ string, b []byte) { streamed.Write(b) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExecID != first.ExecID || res.Rev != first.Rev || res.Text != first.Text || *res.ExitCode != 0 {
		t.Errorf("retry: %+v, want the first's %+v", res, first)
	}
	if streamed.String() != "hello\n" {
		t.Errorf("the retry streamed %q, want the recorded output", streamed.String())
	}
	if got := e.tree("w")["count.txt"]; got != "ran\n" {
		t.Errorf("count.txt %q after a retried exec, want one line", got)
	}
	if got := execs(); got != 1 {
		t.Errorf("%d execs in the journal, want 1", got)
	}
	if e.head("w") != head {
		t.Errorf("the retry moved the head from %d to %d", head, e.head("w"))
	}
	again := call("exec", cmd, "exec-2")
	if again.ExecID == first.ExecID || e.tree("w")["count.txt"] != "ran\nran\n" || execs() != 2 {
		t.Errorf("a new key: exec %s (first %s), count.txt %q, %d execs", again.ExecID, first.ExecID, e.tree("w")["count.txt"], execs())
	}

	// A key over 256 bytes is refused before anything runs, as for writes.
	long := strings.Repeat("k", 300)
	for _, tool := range []string{"exec", "write"} {
		res, err := set.Call(ctx, tool, tools.Call{Args: json.RawMessage(argsFor(tool)), Key: long})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.Code != wire.CodeInvalid {
			t.Errorf("%s with a 300-byte key: %+v, want invalid", tool, res)
		}
	}
	if execs() != 2 || e.tree("w")["count.txt"] != "ran\nran\n" {
		t.Errorf("a refused key ran: %d execs, count.txt %q", execs(), e.tree("w")["count.txt"])
	}

	w1 := call("write", `{"path": "n.txt", "content": "1 1"}`, "write-1")
	w2 := call("write", `{"path": "n.txt", "content": "2 2"}`, "write-1")
	if w2.Rev != w1.Rev || e.tree("w")["n.txt"] != "1 1" {
		t.Errorf("keyed write retried: revisions %d, %d; n.txt %q", w1.Rev, w2.Rev, e.tree("w")["n.txt"])
	}
	e1 := call("edit", `{"path": "n.txt", "old": "1", "new": "11", "all": true}`, "edit-1")
	e2 := call("edit", `{"path": "n.txt", "old": "1", "new": "11", "all": true}`, "edit-1")
	if e2.Rev != e1.Rev || e.tree("w")["n.txt"] != "11 11" || e.head("w") != e1.Rev {
		t.Errorf("keyed edit retried: revisions %d, %d; n.txt %q; head %d", e1.Rev, e2.Rev, e.tree("w")["n.txt"], e.head("w"))
	}
	if strings.Contains(e2.Text, "0 replacements") || !strings.Contains(e2.Text, "already") {
		t.Errorf("the retried edit tells the model %q, want that it was applied already", e2.Text)
	}
}

// argsFor is a valid call of tool for TestKeyTools' refused keys.
func argsFor(tool string) string {
	if tool == "exec" {
		return `{"command": "echo ran >> count.txt"}`
	}
	return `{"path": "k.txt", "content": "x"}`
}
