package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"computerd/client"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// The byte quota counts everything a tenant makes the daemon keep, not
// only workspace content: run steps, memories, skills and exec output.
// Each is refused with 403 quota_exceeded once the tenant is over, and
// what was refused is not stored; deleting frees it again.
func TestQuotaCountsRecords(t *testing.T) {
	const quota = 256 << 10
	e := startWith(t, daemon.Config{Quota: fsstore.Quota{MaxBytes: quota}})
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	usage := func() fsstore.Usage {
		t.Helper()
		u, err := e.d.Store.Usage(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	// Memories: 4 KiB each, until the quota refuses one.
	fact := strings.Repeat("m", 4000)
	var mems int
	for ; mems < 200; mems++ {
		_, err := cl.AddMemory(ctx, fact)
		if err != nil {
			wantQuota(t, "memory over the quota", err)
			break
		}
	}
	if mems == 0 || mems >= 200 {
		t.Fatalf("%d memories of 4000 bytes under a %d byte quota", mems, quota)
	}
	u := usage()
	if u.Records < int64(mems)*4000 || u.Total > quota {
		t.Fatalf("after %d memories: usage %+v", mems, u)
	}
	if list, _ := cl.Memories(ctx); len(list) != mems {
		t.Fatalf("%d memories listed, %d added: a refused one was kept", len(list), mems)
	}
	// Skills, runs and steps are refused too, and nothing of them is kept.
	_, err := cl.SaveSkill(ctx, core.Skill{Name: "big", Body: strings.Repeat("s", 8000)})
	wantQuota(t, "skill over the quota", err)
	if _, err := cl.Skill(ctx, "big"); err == nil {
		t.Fatal("a refused skill was kept")
	}
	_, err = cl.CreateRun(ctx, "w", wire.CreateRun{Task: strings.Repeat("t", 8000), Driver: "d"})
	wantQuota(t, "run over the quota", err)
	if runs, _ := cl.Runs(ctx, "w", 0); len(runs) != 0 {
		t.Fatalf("a refused run was kept: %+v", runs)
	}

	// Free most of it: a run's steps then fill the quota, and are refused.
	list, err := cl.Memories(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list {
		if err := cl.DeleteMemory(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if u := usage(); u.Records > 1000 {
		t.Fatalf("deleted memories still count: %+v", u)
	}
	run, err := cl.CreateRun(ctx, "w", wire.CreateRun{Task: "fill", Driver: "d"})
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"text": strings.Repeat("a", 8000)})
	var steps int
	for seq := 1; seq <= 100; seq++ {
		_, err := cl.BeginStep(ctx, "d", core.Step{Run: run.ID, Seq: seq, Kind: core.StepTool, Tool: "write", Args: args})
		if err != nil {
			wantQuota(t, "step over the quota", err)
			break
		}
		steps = seq
	}
	if steps == 0 || steps >= 100 {
		t.Fatalf("%d steps of 8000 bytes under a %d byte quota", steps, quota)
	}
	detail, err := cl.Run(ctx, run.ID)
	if err != nil || len(detail.Steps) != steps {
		t.Fatalf("run after a refused step: %d steps, %d begun, %v", len(detail.Steps), steps, err)
	}
	if u := usage(); u.Total > quota {
		t.Fatalf("steps left the tenant over its quota: %+v", u)
	}
	// Deleting the workspace frees its runs.
	if err := cl.DeleteWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if u := usage(); u.Records > 0 || u.Total > 0 {
		t.Fatalf("after deleting everything: %+v", u)
	}
}

// An exec's output log counts against the quota: the output of a tenant
// near its quota is cut with the truncated event, naming the quota, and
// the log kept is no bigger than what the quota left.
func TestQuotaCutsExecOutput(t *testing.T) {
	needExec(t)
	const quota = 128 << 10
	e := startWith(t, daemon.Config{Quota: fsstore.Quota{MaxBytes: quota}})
	ctx := context.Background()
	cl := client.New(e.d.URL(), e.token)
	if _, err := cl.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var cut string
	rec, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x"}}, func(ev wire.ExecEvent) error {
		switch ev.Type {
		case "output":
			out.WriteString(ev.Data)
		case "truncated":
			cut = ev.Data
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ExitCode != 0 || !rec.OutputTruncated || rec.StdoutBytes != 1000000 {
		t.Fatalf("exec: %+v", rec)
	}
	if !strings.Contains(cut, "quota") {
		t.Fatalf("truncated event %q, want it to name the quota", cut)
	}
	if out.Len() >= quota || rec.OutputKept > quota {
		t.Fatalf("kept %d bytes of output (log %d) under a %d byte quota", out.Len(), rec.OutputKept, quota)
	}
	u, err := e.d.Store.Usage(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.Records < rec.OutputKept || u.Total > quota+4096 {
		t.Fatalf("usage %+v after an exec that kept %d bytes of output", u, rec.OutputKept)
	}
	// At the quota, a further exec keeps no output at all.
	var got strings.Builder
	rec2, err := cl.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo more"}}, func(ev wire.ExecEvent) error {
		if ev.Type == "output" {
			got.WriteString(ev.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first exec kept %d bytes of 1000000; second kept %q (truncated %v)", rec.OutputKept, got.String(), rec2.OutputTruncated)
	if !rec2.OutputTruncated || got.Len() != 0 {
		t.Fatalf("an exec of a tenant at its quota stored output %q", got.String())
	}
}
