package integration

import (
	"context"
	"reflect"
	"testing"

	"computerd/computerd/api"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
)

// A workspace deleted at the home and made again under its name is
// another one: a mirror of the old one pulls the new one whole (not a
// diff of the new one's revisions applied to the old tree), and a push
// based on the old one is answered base_gone, applying nothing; sent
// whole, it is kept as a copy of the new one, once.
func TestSyncNamesake(t *testing.T) {
	ctx := context.Background()
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.write("w", "old.txt", "old\n")
	e.write("w", "shared.txt", "old\n")
	m, kept := newMirror(t, e), newMirror(t, e)
	st, err := m.Pull(ctx, "w")
	if err != nil || st.HomeWS == 0 {
		t.Fatalf("first pull: %+v %v", st, err)
	}
	if _, err := kept.Pull(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	oldWS, oldRev := st.HomeWS, st.HomeRev
	local := st.Local
	edit, err := m.Store.Commit(ctx, local.ID, (&core.Batch{}).WriteFile("mine.txt", []byte("mine\n"), 0o644), fsstore.CommitInfo{Tenant: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Store.Diff(ctx, local.ID, local.Head, edit.Rev)
	if err != nil {
		t.Fatal(err)
	}

	e.ok("ws", "rm", "w", "--yes")
	e.ok("ws", "create", "w")
	e.write("w", "new.txt", "new\n")
	e.write("w", "shared.txt", "new\n")
	head := e.head("w")
	if head < oldRev {
		t.Fatalf("the new w (head %d) has fewer revisions than the old one pulled (%d): the test shows nothing", head, oldRev)
	}

	// A push based on the old w.
	hdr := syncproto.PushHeader{PushID: "p-old", Base: oldRev, WS: oldWS}
	res, err := m.Push(ctx, "w", local.ID, cs, hdr)
	if err != nil || res.BaseGone == "" || res.Revision.Rev != 0 || e.head("w") != head {
		t.Fatalf("push based on the deleted w: %+v %v (head %d, was %d)", res, err, e.head("w"), head)
	}
	res, err = m.PushWhole(ctx, "w", local.ID, edit.Rev, hdr)
	if err != nil || res.KeptAs != "w.conflict-p-old" || res.Duplicate || e.head("w") != head {
		t.Fatalf("whole push: %+v %v", res, err)
	}
	if got, want := e.tree(res.KeptAs), map[string]string{"old.txt": "old\n", "shared.txt": "old\n", "mine.txt": "mine\n"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the copy: %v, want %v", got, want)
	}
	again, err := m.PushWhole(ctx, "w", local.ID, edit.Rev, hdr)
	if err != nil || !again.Duplicate || again.KeptAs != res.KeptAs || again.Revision.Rev != res.Revision.Rev {
		t.Fatalf("whole push again: %+v %v, first %+v", again, err, res)
	}

	// A mirror changed locally since asks for everything; one that still
	// equals the old w's head asks for a diff from it, and gets the new
	// w whole all the same.
	for _, mm := range []*syncproto.Mirror{m, kept} {
		st, err := mm.Pull(ctx, "w")
		if err != nil || st.HomeWS == oldWS || st.HomeRev != head {
			t.Fatalf("pull of the new w: %+v %v", st, err)
		}
		if got, want := localTree(t, mm.Store, st.Local.ID), e.tree("w"); !reflect.DeepEqual(got, want) {
			t.Fatalf("mirror after the namesake's pull: %v, want %v", got, want)
		}
	}
}
