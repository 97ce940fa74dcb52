package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"computerd/client"
	"computerd/core"
	"computerd/wire"
)

// badSegments are values no workspace name, id or skill name may be: each
// would reach another route than the one the call names, at a server that
// cleans paths or decodes them twice.
var badSegments = []string{"", ".", "..", "a/b", "../x", `a\b`, "%2e%2e", "%2E", "a%2Fb", "..%2f", "%252e%252e"}

// TestRefusesBadSegments checks that every call that puts a workspace
// name, an exec or run id or a skill name in its URL refuses one that is
// not a single path segment, as an invalid argument, before any request.
func TestRefusesBadSegments(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "cdt_test")
	ctx := context.Background()
	body := func() *strings.Reader { return strings.NewReader("x") }
	calls := map[string]func(v string) error{
		"Workspace":       func(v string) error { _, err := c.Workspace(ctx, v); return err },
		"DeleteWorkspace": func(v string) error { return c.DeleteWorkspace(ctx, v) },
		"Fork":            func(v string) error { _, err := c.Fork(ctx, v, "copy", 0); return err },
		"Log":             func(v string) error { _, err := c.Log(ctx, v, 0); return err },
		"Diff":            func(v string) error { _, err := c.Diff(ctx, v, 0, 0); return err },
		"DiffStat":        func(v string) error { _, err := c.DiffStat(ctx, v, 0, 0); return err },
		"Changeset":       func(v string) error { _, err := c.Changeset(ctx, v, 0, 0); return err },
		"Restore":         func(v string) error { _, err := c.Restore(ctx, v, 1, ""); return err },
		"Read":            func(v string) error { _, err := c.Read(ctx, v, "f", client.ReadOptions{}); return err },
		"Write":           func(v string) error { _, err := c.Write(ctx, v, "f", body(), client.WriteOptions{}); return err },
		"Stat":            func(v string) error { _, err := c.Stat(ctx, v, "f", 0); return err },
		"List":            func(v string) error { _, err := c.List(ctx, v, "", 0, false); return err },
		"Ops":             func(v string) error { _, err := c.Ops(ctx, v, wire.Ops{}); return err },
		"Edit":            func(v string) error { _, err := c.Edit(ctx, v, wire.Edit{Path: "f"}); return err },
		"Find":            func(v string) error { _, err := c.Find(ctx, v, client.FindOptions{}); return err },
		"Grep": func(v string) error {
			return c.Grep(ctx, v, client.GrepOptions{Pattern: "x"}, func(wire.Match) error { return nil })
		},
		"Export": func(v string) error { _, err := c.Export(ctx, v, client.ExportOptions{}); return err },
		"Attach": func(v string) error { _, err := c.Attach(ctx, v, body(), client.AttachOptions{}); return err },
		"Exec": func(v string) error {
			_, err := c.Exec(ctx, v, wire.ExecRequest{Argv: []string{"true"}}, nil)
			return err
		},
		"Execs":       func(v string) error { _, err := c.Execs(ctx, v, 0); return err },
		"Undelivered": func(v string) error { _, err := c.Undelivered(ctx, v); return err },
		"Mount":       func(v string) error { _, err := c.Mount(ctx, v, "/mnt/x"); return err },
		"CreateRun":   func(v string) error { _, err := c.CreateRun(ctx, v, wire.CreateRun{}); return err },
		"Runs":        func(v string) error { _, err := c.Runs(ctx, v, 0); return err },
		"ExecRecord":  func(v string) error { _, err := c.ExecRecord(ctx, "w", v); return err },
		"FollowExec":  func(v string) error { _, err := c.FollowExec(ctx, "w", v, nil); return err },
		"KillExec":    func(v string) error { return c.KillExec(ctx, "w", v) },
		"Run":         func(v string) error { _, err := c.Run(ctx, v); return err },
		"ClaimRun":    func(v string) error { _, err := c.ClaimRun(ctx, v, "d"); return err },
		"BeginStep":   func(v string) error { _, err := c.BeginStep(ctx, "d", core.Step{Run: v, Seq: 1}); return err },
		"EndStep":     func(v string) error { _, err := c.EndStep(ctx, "d", core.Step{Run: v, Seq: 1}); return err },
		"EndRun":      func(v string) error { _, err := c.EndRun(ctx, v, "d", core.RunDone, ""); return err },
		"CancelRun":   func(v string) error { _, err := c.CancelRun(ctx, v); return err },
		"FollowRun":   func(v string) error { return c.FollowRun(ctx, v, 0, false, func(core.Step) error { return nil }) },
		"Skill":       func(v string) error { _, err := c.Skill(ctx, v); return err },
		"SaveSkill":   func(v string) error { _, err := c.SaveSkill(ctx, core.Skill{Name: v}); return err },
		"DeleteSkill": func(v string) error { return c.DeleteSkill(ctx, v) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			for _, v := range badSegments {
				before := requests.Load()
				err := call(v)
				if !errors.Is(err, core.ErrInvalidArgument) {
					t.Errorf("%s(%q): %v, want an invalid argument", name, v, err)
				} else if !strings.Contains(err.Error(), "path segment") {
					t.Errorf("%s(%q): %q does not say why", name, v, err)
				}
				if n := requests.Load() - before; n != 0 {
					t.Errorf("%s(%q) sent %d requests", name, v, n)
				}
			}
			// A good value is sent (and fails at this server).
			before := requests.Load()
			if err := call("w-1.a_b"); errors.Is(err, core.ErrInvalidArgument) || requests.Load() == before {
				t.Errorf("%s(%q): %v after %d requests, want it sent", name, "w-1.a_b", err, requests.Load()-before)
			}
		})
	}
}
