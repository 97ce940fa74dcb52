package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/tools"
	"computerd/wire"
)

// toolSet is the model's tool set on workspace ws of e, as tenant alice.
func (e *env) toolSet(ws string) *tools.Set {
	return &tools.Set{Client: client.New(e.d.URL(), e.token), Workspace: ws}
}

// mustCall calls a tool and fails the test if Call itself fails (a tool's
// own failure is a result, and is returned).
func mustCall(tb testing.TB, s *tools.Set, name, args string) tools.Result {
	tb.Helper()
	res, err := s.Call(context.Background(), name, tools.Call{Args: json.RawMessage(args)})
	if err != nil {
		tb.Fatalf("tool %s %s: %v", name, args, err)
	}
	return res
}

// Every file tool, through a real computerd: what it answers the model,
// and the revision a mutation reports is the head it made.
func TestToolFiles(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	set := e.toolSet("w")
	cl := set.Client
	e.write("w", "a.txt", "one\ntwo\nthree\nfour\nfive\n")
	e.write("w", "src/main.go", "package main\n\nfunc main() {\n\tprintln(\"Hi\")\n}\n")
	e.write("w", "src/util/util.go", "package util\n\n// hi says hi.\nfunc hi() {}\n")
	e.write("w", "noeol.txt", "x\ny")
	if _, err := cl.Ops(context.Background(), "w", wire.Ops{Ops: []core.Op{{Kind: core.OpSymlink, Path: "link", Target: "a.txt"}}}); err != nil {
		t.Fatal(err)
	}
	var long strings.Builder
	for i := 1; i <= 2500; i++ {
		fmt.Fprintf(&long, "l%d\n", i)
	}
	e.write("w", "long.txt", long.String())
	lines := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			fmt.Fprintf(&b, "%d\tl%d\n", i, i)
		}
		return b.String()
	}

	for _, tc := range []struct {
		name, tool, args string
		want             string
	}{
		{"read whole", "read", `{"path": "a.txt"}`, "1\tone\n2\ttwo\n3\tthree\n4\tfour\n5\tfive\n"},
		{"read window", "read", `{"path": "a.txt", "offset": 2, "limit": 2}`, "2\ttwo\n3\tthree\n"},
		{"read from offset", "read", `{"path": "a.txt", "offset": 4}`, "4\tfour\n5\tfive\n"},
		{"read past the end", "read", `{"path": "a.txt", "offset": 9}`, "(no lines from line 9)"},
		{"read last line without newline", "read", `{"path": "noeol.txt"}`, "1\tx\n2\ty\n"},
		{"read stops at 2000 lines", "read", `{"path": "long.txt"}`, lines(1, 2000)},
		{"read limit over 2000", "read", `{"path": "long.txt", "offset": 2400, "limit": 5000}`, lines(2400, 2500)},
		{"ls root", "ls", `{}`, "a.txt\t24\nlink -> a.txt\nlong.txt\t" + fmt.Sprint(long.Len()) + "\nnoeol.txt\t3\nsrc/\n"},
		{"ls dir", "ls", `{"path": "src"}`, "main.go\t45\nutil/\n"},
		{"find glob", "find", `{"name": "*.go"}`, "src/main.go\nsrc/util/util.go"},
		{"find path glob", "find", `{"name": "src/**/util.go"}`, "src/util/util.go"},
		{"find dirs", "find", `{"type": "d", "path": "src"}`, "src/util"},
		{"find symlinks", "find", `{"type": "l"}`, "link"},
		{"find nothing", "find", `{"name": "*.rs"}`, "(nothing found)"},
		{"grep", "grep", `{"pattern": "^func"}`, "src/main.go:3:func main() {\nsrc/util/util.go:4:func hi() {}\n"},
		{"grep ignore case, glob", "grep", `{"pattern": "hi", "ignore_case": true, "glob": "*.go"}`,
			"src/main.go:4:\tprintln(\"Hi\")\nsrc/util/util.go:3:// hi says hi.\nsrc/util/util.go:4:func hi() {}\n"},
		{"grep context", "grep", `{"pattern": "three", "path": "a.txt", "context": 1}`, "a.txt-2-two\na.txt:3:three\na.txt-4-four\n"},
		{"grep no match", "grep", `{"pattern": "nowhere"}`, "(no matches)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustCall(t, set, tc.tool, tc.args)
			if res.IsError {
				t.Fatalf("error result %+v", res)
			}
			if got, want := res.Text, tc.want; got != want {
				t.Errorf("got\n%q\nwant\n%q", got, want)
			}
		})
	}

	t.Run("write", func(t *testing.T) {
		head := e.head("w")
		res := mustCall(t, set, "write", `{"path": "new/dir/f.txt", "content": "fresh\n"}`)
		if res.IsError || res.Rev != head+1 || e.head("w") != head+1 {
			t.Fatalf("write: %+v, head %d from %d", res, e.head("w"), head)
		}
		if got, want := res.Text, fmt.Sprintf("wrote new/dir/f.txt (6 bytes): revision %d", head+1); got != want {
			t.Errorf("text %q, want %q", got, want)
		}
		tree := e.tree("w")
		if tree["new/dir/f.txt"] != "fresh\n" || tree["new/dir"] != "dir" {
			t.Errorf("tree after write: %v", tree)
		}
		// An empty file is a file too.
		if res := mustCall(t, set, "write", `{"path": "empty", "content": ""}`); res.IsError || e.tree("w")["empty"] != "" {
			t.Errorf("write empty: %+v", res)
		}
	})

	t.Run("edit", func(t *testing.T) {
		head := e.head("w")
		res := mustCall(t, set, "edit", `{"path": "a.txt", "old": "two\n", "new": "2\n"}`)
		if res.IsError || res.Rev != head+1 {
			t.Fatalf("edit: %+v (head was %d)", res, head)
		}
		if got, want := res.Text, fmt.Sprintf("edited a.txt (1 replacements): revision %d", head+1); got != want {
			t.Errorf("text %q, want %q", got, want)
		}
		res = mustCall(t, set, "edit", `{"path": "src/util/util.go", "old": "hi", "new": "hello", "all": true}`)
		if res.IsError || !strings.Contains(res.Text, "(3 replacements)") {
			t.Fatalf("edit all: %+v", res)
		}
		tree := e.tree("w")
		if got, want := tree["a.txt"], "one\n2\nthree\nfour\nfive\n"; got != want {
			t.Errorf("a.txt %q, want %q", got, want)
		}
		if got, want := tree["src/util/util.go"], "package util\n\n// hello says hello.\nfunc hello() {}\n"; got != want {
			t.Errorf("util.go %q, want %q", got, want)
		}
	})

	t.Run("log", func(t *testing.T) {
		head := e.head("w")
		res := mustCall(t, set, "log", `{"limit": 2}`)
		rows := strings.Split(strings.TrimSuffix(res.Text, "\n"), "\n")
		if res.IsError || len(rows) != 2 {
			t.Fatalf("log limit 2: %+v", res)
		}
		for i, row := range rows {
			f := strings.Split(row, "\t")
			if len(f) != 5 || f[0] != fmt.Sprint(head-int64(i)) || f[1] != "api" || f[3] != "1 changes" {
				t.Errorf("log row %d: %q", i, row)
			}
			if _, err := time.Parse(time.RFC3339, f[2]); err != nil {
				t.Errorf("log row %d time: %v", i, err)
			}
		}
		if !strings.HasSuffix(rows[0], "\tedit src/util/util.go") || !strings.HasSuffix(rows[1], "\tedit a.txt") {
			t.Errorf("log messages: %q", rows)
		}
		all := mustCall(t, set, "log", `{}`)
		if n := strings.Count(all.Text, "\n"); n != min(int(head), 20) {
			t.Errorf("log default: %d rows, want %d", n, min(int(head), 20))
		}
	})

	t.Run("diff", func(t *testing.T) {
		head := e.head("w")
		res := mustCall(t, set, "diff", fmt.Sprintf(`{"from": %d}`, head-2))
		for _, want := range []string{"--- a/a.txt", "+++ b/a.txt", "-two\n", "+2\n", "-func hi() {}\n", "+func hello() {}\n"} {
			if !strings.Contains(res.Text, want) {
				t.Errorf("diff from %d lacks %q:\n%s", head-2, want, res.Text)
			}
		}
		res = mustCall(t, set, "diff", fmt.Sprintf(`{"from": %d, "to": %d, "stat": true}`, head-2, head-1))
		if want := " a.txt |    2 +-\n 1 files changed, 1 insertions(+), 1 deletions(-)\n"; res.Text != want {
			t.Errorf("diff stat: %q, want %q", res.Text, want)
		}
		if res := mustCall(t, set, "diff", fmt.Sprintf(`{"from": %d, "to": %d}`, head, head)); res.Text != "(no changes)" {
			t.Errorf("diff of a revision with itself: %q", res.Text)
		}
	})
}

// A tool's failure reaches the model as a result with the server's code,
// and changes nothing.
func TestToolErrors(t *testing.T) {
	e := start(t, api.Limits{MaxEditSize: 1 << 10})
	e.ok("ws", "create", "w")
	e.write("w", "f", "same same\n")
	e.write("w", "d/inner", "x")
	e.write("w", "big", strings.Repeat("b", 2<<10))
	set := e.toolSet("w")
	for _, tc := range []struct {
		name, tool, args string
		code             string
	}{
		{"unknown tool", "cat", `{"path": "f"}`, wire.CodeNotFound},
		{"bad JSON", "write", `{"path": "f", "content": `, wire.CodeInvalid},
		{"unknown field", "write", `{"path": "f", "contents": "x"}`, wire.CodeInvalid},
		{"missing file", "read", `{"path": "missing"}`, wire.CodeNotFound},
		{"read a directory", "read", `{"path": "d"}`, wire.CodeIsDir},
		{"read an escape", "read", `{"path": "../etc/passwd"}`, wire.CodeInvalidPath},
		{"ls missing", "ls", `{"path": "nope"}`, wire.CodeNotFound},
		{"edit not unique", "edit", `{"path": "f", "old": "same", "new": "other"}`, wire.CodeInvalid},
		{"edit not found", "edit", `{"path": "f", "old": "absent", "new": "x"}`, wire.CodeInvalid},
		{"edit missing file", "edit", `{"path": "missing", "old": "a", "new": "b"}`, wire.CodeNotFound},
		{"edit too large", "edit", `{"path": "big", "old": "b", "new": "c", "all": true}`, wire.CodeTooLarge},
		{"write over a directory's child", "write", `{"path": "f/sub", "content": "x"}`, wire.CodeNotDir},
		{"write an escape", "write", `{"path": "../up", "content": "x"}`, wire.CodeInvalidPath},
		{"grep bad pattern", "grep", `{"pattern": "("}`, wire.CodeInvalid},
		{"find bad type", "find", `{"type": "x"}`, wire.CodeInvalid},
		{"diff unknown revision", "diff", `{"from": 1, "to": 99}`, wire.CodeUnknownRevision},
		{"exec bad timeout", "exec", `{"command": "true", "timeout": "soon"}`, wire.CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.head("w")
			res := mustCall(t, set, tc.tool, tc.args)
			if !res.IsError {
				t.Fatalf("no error: %+v", res)
			}
			if got, want := res.Code, tc.code; got != want {
				t.Errorf("code %q, want %q (%s)", got, want, res.Text)
			}
			if res.Text == "" {
				t.Error("no message for the model")
			}
			if after := e.head("w"); after != before {
				t.Errorf("a failed call moved the head from %d to %d", before, after)
			}
		})
	}
	t.Run("no workspace", func(t *testing.T) {
		res := mustCall(t, e.toolSet("nope"), "ls", `{}`)
		if got, want := res.Code, wire.CodeWorkspaceNotFound; !res.IsError || got != want {
			t.Errorf("ls of a missing workspace: %+v, want code %q", res, want)
		}
	})
	t.Run("another tenant's workspace", func(t *testing.T) {
		bob := &tools.Set{Client: client.New(e.d.URL(), e.newToken("bob")), Workspace: "w"}
		res := mustCall(t, bob, "read", `{"path": "f"}`)
		if got, want := res.Code, wire.CodeWorkspaceNotFound; !res.IsError || got != want || strings.Contains(res.Text, "same") {
			t.Errorf("bob reads alice's file: %+v, want code %q", res, want)
		}
	})
}

// exec runs its command in a sandbox, hands output to Call.Output as it
// comes, in order, and answers the exit code, exec id and revision.
func TestToolExec(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "in.txt", "input\n")
	set := e.toolSet("w")
	ctx := context.Background()

	t.Run("streams in order", func(t *testing.T) {
		var mu sync.Mutex
		var chunks []string
		var first time.Time
		out := map[string]*strings.Builder{"stdout": {}, "stderr": {}}
		res, err := set.Call(ctx, "exec", tools.Call{
			Args: json.RawMessage(`{"command": "echo one; sleep 0.4; echo warn >&2; sleep 0.4; echo two; echo three"}`),
			Output: func(stream string, data []byte) {
				mu.Lock()
				defer mu.Unlock()
				if first.IsZero() {
					first = time.Now()
				}
				chunks = append(chunks, stream+":"+string(data))
				out[stream].Write(data)
			}})
		done := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.ExitCode == nil || *res.ExitCode != 0 || res.ExecID == "" {
			t.Fatalf("exec: %+v", res)
		}
		if got, want := out["stdout"].String(), "one\ntwo\nthree\n"; got != want {
			t.Errorf("stdout %q, want %q (chunks %q)", got, want, chunks)
		}
		if got, want := out["stderr"].String(), "warn\n"; got != want {
			t.Errorf("stderr %q, want %q", got, want)
		}
		if len(chunks) < 3 {
			t.Errorf("output in %d chunks %q: it was not streamed as produced", len(chunks), chunks)
		}
		if waited := done.Sub(first); waited < 500*time.Millisecond {
			t.Errorf("the first output came %v before the end; the command sleeps 0.8s after it", waited)
		}
		if len(chunks) >= 2 && (chunks[0] != "stdout:one\n" || chunks[1] != "stderr:warn\n") {
			t.Errorf("chunks %q, want one, then warn, then the rest", chunks)
		}
		if got, want := res.Text, "one\nwarn\ntwo\nthree\n\n[exit 0]"; got != want {
			t.Errorf("text %q, want %q", got, want)
		}
		if res.Rev != 0 {
			t.Errorf("a command that wrote nothing reports revision %d", res.Rev)
		}
	})

	t.Run("exit 3", func(t *testing.T) {
		head := e.head("w")
		res := mustCall(t, set, "exec", `{"command": "cat in.txt; echo made > out.txt; exit 3"}`)
		if !res.IsError || res.Code != "exit" || res.ExitCode == nil || *res.ExitCode != 3 {
			t.Fatalf("exec exit 3: %+v", res)
		}
		if res.ExecID == "" || res.Rev != head+1 || e.head("w") != head+1 {
			t.Fatalf("exec id %q, rev %d, head %d from %d", res.ExecID, res.Rev, e.head("w"), head)
		}
		if want := fmt.Sprintf("input\n\n[exit 3; its writes are revision %d]", head+1); res.Text != want {
			t.Errorf("text %q, want %q", res.Text, want)
		}
		if got := e.tree("w")["out.txt"]; got != "made\n" {
			t.Errorf("out.txt %q", got)
		}
		rec, err := set.Client.ExecRecord(ctx, "w", res.ExecID)
		if err != nil || rec.ExitCode != 3 || rec.Rev != res.Rev {
			t.Errorf("journal record %+v %v", rec, err)
		}
	})

	t.Run("cwd and timeout", func(t *testing.T) {
		e.write("w", "sub/here", "")
		res := mustCall(t, set, "exec", `{"command": "ls; pwd", "cwd": "sub"}`)
		if res.IsError || res.Text != "here\n/workspace/sub\n\n[exit 0]" {
			t.Errorf("exec in sub: %+v", res)
		}
		start := time.Now()
		res = mustCall(t, set, "exec", `{"command": "echo before; sleep 30", "timeout": "1s"}`)
		if !res.IsError || res.Code != "exit" || !strings.Contains(res.Text, "timed out") || !strings.HasPrefix(res.Text, "before\n") {
			t.Errorf("exec timeout: %+v", res)
		}
		if el := time.Since(start); el > 15*time.Second {
			t.Errorf("a 1s timeout answered after %v", el)
		}
	})

	t.Run("long output keeps head and tail", func(t *testing.T) {
		var streamed int
		res, err := set.Call(ctx, "exec", tools.Call{Args: json.RawMessage(`{"command": "seq 1 100000"}`),
			Output: func(_ string, data []byte) { streamed += len(data) }})
		if err != nil {
			t.Fatal(err)
		}
		var full strings.Builder
		for i := 1; i <= 100000; i++ {
			fmt.Fprintf(&full, "%d\n", i)
		}
		if streamed != full.Len() {
			t.Errorf("Output got %d bytes, the command wrote %d", streamed, full.Len())
		}
		if res.IsError || len(res.Text) > tools.MaxResult {
			t.Fatalf("exec seq: error %v, %d bytes of text (max %d)", res.IsError, len(res.Text), tools.MaxResult)
		}
		if !strings.HasPrefix(res.Text, "1\n2\n3\n") || !strings.HasSuffix(res.Text, "99999\n100000\n\n[exit 0]") || !strings.Contains(res.Text, " bytes cut ...]") {
			t.Errorf("clipped text: head %q ... tail %q", res.Text[:40], res.Text[len(res.Text)-40:])
		}
		if len(res.Text) < tools.MaxResult/2 {
			t.Errorf("only %d bytes kept of %d", len(res.Text), full.Len())
		}
	})
}

// log answers 20 revisions by default, as many as asked up to 100, and
// the most it may when asked for more.
func TestToolLogLimit(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	cl := client.New(e.d.URL(), e.token)
	for i := range 30 {
		if _, err := cl.Write(context.Background(), "w", "f", strings.NewReader(fmt.Sprint(i)), client.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	head := int(e.head("w"))
	set := e.toolSet("w")
	for _, tc := range []struct {
		name, args string
		want       int
	}{
		{"default", `{}`, 20},
		{"some", `{"limit": 5}`, 5},
		{"more than the default", `{"limit": 25}`, 25},
		{"over the maximum", `{"limit": 500}`, min(head, 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustCall(t, set, "log", tc.args)
			if got := strings.Count(res.Text, "\n"); res.IsError || got != tc.want {
				t.Errorf("log %s: %d rows (error %v), want %d", tc.args, got, res.IsError, tc.want)
			}
			if first := fmt.Sprintf("%d\t", head); !strings.HasPrefix(res.Text, first) {
				t.Errorf("log %s does not start at the head %d: %q", tc.args, head, res.Text[:min(len(res.Text), 40)])
			}
		})
	}
}

// grep answers at most 500 lines, and says it stopped only when there was
// more to say.
func TestToolGrepLimit(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "five-hundred", strings.Repeat("hit\n", 500))
	e.write("w", "six-hundred", strings.Repeat("hit\n", 600))
	set := e.toolSet("w")
	for _, tc := range []struct {
		name, args string
		rows       int
		cut        bool
	}{
		{"exactly 500", `{"pattern": "hit", "path": "five-hundred"}`, 500, false},
		{"600", `{"pattern": "hit", "path": "six-hundred"}`, 500, true},
		{"both", `{"pattern": "hit"}`, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustCall(t, set, "grep", tc.args)
			rows := strings.Split(strings.TrimSuffix(res.Text, "\n"), "\n")
			cut := strings.HasPrefix(rows[len(rows)-1], "[stopped at 500 lines")
			if cut {
				rows = rows[:len(rows)-1]
			}
			if res.IsError || len(rows) != tc.rows || cut != tc.cut {
				t.Errorf("grep %s: %d rows, cut %v (error %v); want %d rows, cut %v", tc.args, len(rows), cut, res.IsError, tc.rows, tc.cut)
			}
			for _, r := range rows {
				if !strings.HasSuffix(r, ":hit") {
					t.Errorf("row %q", r)
					break
				}
			}
		})
	}
}

// A read whose lines outgrow one answer stops at a whole line and says
// where to read on; reading on from there gives the next lines, so a
// model can page through any text file.
func TestToolReadPaging(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	line := strings.Repeat("x", 99)
	var file strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&file, "%04d%s\n", i, line)
	}
	e.write("w", "wide.txt", file.String())
	set := e.toolSet("w")
	next, pages := 1, 0
	for next <= 2000 && pages < 100 {
		pages++
		res := mustCall(t, set, "read", fmt.Sprintf(`{"path": "wide.txt", "offset": %d}`, next))
		if res.IsError || len(res.Text) > tools.MaxResult {
			t.Fatalf("page %d: error %v, %d bytes", pages, res.IsError, len(res.Text))
		}
		rows := strings.Split(strings.TrimSuffix(res.Text, "\n"), "\n")
		last := rows[len(rows)-1]
		more := strings.HasPrefix(last, "[")
		if more {
			rows = rows[:len(rows)-1]
		}
		for _, r := range rows {
			if want := fmt.Sprintf("%d\t%04d%s", next, next, line); r != want {
				t.Fatalf("page %d: row %q, want %q", pages, r[:min(len(r), 20)], want[:20])
			}
			next++
		}
		if more != (next <= 2000) {
			t.Fatalf("page %d ends %q with line %d next", pages, last, next)
		}
		if more && !strings.Contains(last, fmt.Sprintf("offset %d", next)) {
			t.Fatalf("page %d: %q does not say to read on at offset %d", pages, last, next)
		}
	}
	if next != 2001 || pages < 2 {
		t.Errorf("paged to line %d in %d pages", next, pages)
	}
}

// A diff too long for one answer keeps its head and its true end around
// the cut marker: never the middle passed off as the end.
func TestToolDiffLong(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	var old, new strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&old, "line %05d old\n", i)
		fmt.Fprintf(&new, "line %05d new\n", i)
	}
	e.write("w", "f", old.String())
	from := e.head("w")
	e.write("w", "f", new.String())
	res := mustCall(t, e.toolSet("w"), "diff", fmt.Sprintf(`{"from": %d}`, from))
	if res.IsError || len(res.Text) > tools.MaxResult+64 {
		t.Fatalf("diff: error %v, %d bytes", res.IsError, len(res.Text))
	}
	if !strings.HasPrefix(res.Text, "diff --git a/f b/f\n--- a/f\n+++ b/f\n") {
		t.Errorf("diff head %q", res.Text[:min(40, len(res.Text))])
	}
	if !strings.HasSuffix(res.Text, "+line 04999 new\n") || !strings.Contains(res.Text, " bytes cut ...]") {
		t.Errorf("the diff's tail is not its end: %q", res.Text[len(res.Text)-80:])
	}
	if stat := mustCall(t, e.toolSet("w"), "diff", fmt.Sprintf(`{"from": %d, "stat": true}`, from)); !strings.Contains(stat.Text, "10000 +") {
		t.Errorf("stat: %q", stat.Text)
	}
}
