// Package overlay gives an exec its /workspace: a kernel overlayfs whose
// lower layer is the exec's base revision in the daemon's revision view
// (fusefs.View, whose caches outlive every exec) and whose upper layer is
// a directory on local disk that takes the exec's writes at disk speed:
// on a volume of its own (computerd/loopfs) when the exec's writes are
// bounded, so that a command that fills it gets ENOSPC. When the command
// ends, what the upper layer holds becomes one changeset (changes.go),
// committed as one revision of the workspace. The upper layer outlives a
// crash of computerd or of the container; Recover turns what it holds
// into the exec's draft, which the runner then commits as an interrupted
// revision.
package overlay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/loopfs"
	"computerd/computerd/mountinfo"
	"computerd/core"
	"computerd/fsstore"
)

// ErrKeepDraft, wrapped in an error from Options.Deliver, says the
// changes could not be delivered now and the draft must keep them.
var ErrKeepDraft = errors.New("overlay: changes kept in the draft")

// Options configures Open.
type Options struct {
	Store     *fsstore.Store
	View      *fusefs.View
	Workspace int64
	BaseRev   int64 // 0: the head
	// Dir is the layer's own directory, which must not exist: it holds
	// the upper layer, overlayfs's work directory, the mount point and a
	// record of the layer (for Recover).
	Dir string
	// UpperSize, if positive, bounds what the exec may write: the upper
	// layer and overlayfs's work directory are on a volume of that size
	// (a loopfs.SizeClass), made by Volumes or taken from Pool (which may
	// be nil). Zero puts them in Dir, on the disk beneath, unbounded.
	UpperSize int64
	Volumes   *loopfs.Maker
	Pool      *loopfs.Pool
	// Info is the template of the exec's commit (Source exec, tenant, exec id, message).
	Info fsstore.CommitInfo
	// Deliver, if set, replaces committing the changeset to the workspace
	// (an executor pushes it home). An error wrapping ErrKeepDraft
	// keeps the changes in the draft for a later delivery.
	Deliver func(ctx context.Context, draft fsstore.Draft, cs *core.Changeset, info fsstore.CommitInfo) (core.Revision, error)
}

// recordName is the file in a layer's directory that describes it.
const recordName = "layer.json"

// record is what a layer's directory says of it, for Recover.
type record struct {
	Workspace int64  `json:"workspace"`
	Base      int64  `json:"base"`
	Draft     int64  `json:"draft"`
	Label     string `json:"label"`
}

// Layer is one exec's /workspace.
type Layer struct {
	opt   Options
	ws    core.Workspace
	base  int64
	lower string
	draft fsstore.Draft
	// release lets the view move the lower layer's tree on.
	release func()

	mu        sync.Mutex
	committed bool
	keptDraft bool  // the draft holds the changes: keep it
	result    error // of the commit
	target    int64
}

// Open makes the layer's directories, a draft that pins the base revision
// (and takes the changes if they cannot be delivered), and mounts the
// overlay at Mountpoint.
func Open(ctx context.Context, opt Options) (l *Layer, err error) {
	if opt.Store == nil || opt.View == nil {
		return nil, fmt.Errorf("overlay: no store or view")
	}
	ws, err := opt.Store.WorkspaceByID(ctx, opt.Workspace)
	if err != nil {
		return nil, fmt.Errorf("overlay: workspace %d: %w", opt.Workspace, err)
	}
	base := opt.BaseRev
	if base == core.Head {
		base = ws.Head
	}
	label := ExecLabel(opt.Info.ExecID)
	draft, err := opt.Store.CreateDraft(ctx, ws.ID, base, label)
	if err != nil {
		return nil, fmt.Errorf("overlay: draft of %s: %w", ws.Name, err)
	}
	l = &Layer{opt: opt, ws: ws, base: base, draft: draft, target: draft.ID}
	made := false
	defer func() {
		if err != nil {
			if l.release != nil {
				l.release()
			}
			unix.Unmount(l.Mountpoint(), unix.MNT_DETACH)
			if made {
				loopfs.RemoveVolume(opt.Dir)
			}
			opt.Store.DeleteWorkspace(context.WithoutCancel(ctx), draft.ID)
		}
	}()
	if l.lower, l.release, err = opt.View.Acquire(ctx, ws.ID, base); err != nil {
		return nil, fmt.Errorf("overlay: view of %s@%d: %w", ws.Name, base, err)
	}
	switch {
	case opt.UpperSize <= 0:
		err = os.Mkdir(opt.Dir, 0o700)
	case opt.Pool.Take(opt.Dir, opt.UpperSize):
	default:
		err = opt.Volumes.MakeVolume(opt.Dir, opt.UpperSize)
	}
	if err != nil {
		return nil, fmt.Errorf("overlay: upper layer of %d bytes: %w", opt.UpperSize, err)
	}
	made = true
	for _, sub := range []string{upperDir(opt.Dir), workDir(opt.Dir), l.Mountpoint()} {
		if err := os.Mkdir(sub, 0o755); err != nil {
			return nil, fmt.Errorf("overlay: %w", err)
		}
	}
	rec, _ := json.Marshal(record{Workspace: ws.ID, Base: base, Draft: draft.ID, Label: label})
	if err := writeFileSync(filepath.Join(opt.Dir, recordName), rec); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	if err := mount(l.lower, opt.Dir); err != nil {
		return nil, err
	}
	return l, nil
}

// ExecLabel is the label of the draft that holds exec id's writes
// (Recover finds the exec by it).
func ExecLabel(id string) string { return "exec-" + safeLabel(id) }

// safeLabel keeps the characters a workspace name may hold.
func safeLabel(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > 100 {
		b = b[:100]
	}
	return string(b)
}

// upperRoot is the directory of layer dir that holds the upper layer and
// the work directory: the layer's volume, or dir itself.
func upperRoot(dir string) string {
	if loopfs.IsVolume(dir) {
		return filepath.Join(dir, loopfs.VolumeFS)
	}
	return dir
}

func upperDir(dir string) string { return filepath.Join(upperRoot(dir), "upper") }
func workDir(dir string) string  { return filepath.Join(upperRoot(dir), "work") }

// removeLayer removes layer dir, whose overlay is unmounted.
func removeLayer(dir string) error { return loopfs.RemoveVolume(dir) }

// mount mounts the overlay of lower and dir's upper layer at dir/mnt.
func mount(lower, dir string) error {
	// redirect_dir off: renaming a directory of the lower layer fails with
	// EXDEV, which mv, cp and package managers answer by copying (as in
	// Docker's default); index and metacopy off: the upper layer holds
	// whole files, nothing the changeset has to chase.
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,index=off,metacopy=off",
		lower, upperDir(dir), workDir(dir))
	if err := unix.Mount("overlay", filepath.Join(dir, "mnt"), "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("overlay: mount over %s: %w", lower, err)
	}
	return nil
}

// Mountpoint is the directory to bind at /workspace.
func (l *Layer) Mountpoint() string { return filepath.Join(l.opt.Dir, "mnt") }

// Commit commits what the exec wrote as one revision of the workspace
// (changed is false if it wrote nothing), based on the base revision, so
// a conflict with what others committed since is reported by path. On a
// conflict the changes are kept in a new workspace (the error is a
// *fusefs.ConflictError naming it). Call it once the command has ended;
// later calls return the first one's error.
func (l *Layer) Commit(ctx context.Context) (core.Revision, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.committed {
		return core.Revision{}, false, l.result
	}
	l.committed = true
	rev, changed, err := l.commit(ctx)
	l.result = err
	return rev, changed, err
}

// Retry commits again after a commit that failed (for want of space:
// core.ErrNoSpace), as Commit would have; after a commit that succeeded
// it does nothing.
func (l *Layer) Retry(ctx context.Context) (core.Revision, bool, error) {
	l.mu.Lock()
	if l.committed && l.result == nil {
		l.mu.Unlock()
		return core.Revision{}, false, nil
	}
	l.committed = false
	l.mu.Unlock()
	return l.Commit(ctx)
}

func (l *Layer) commit(ctx context.Context) (core.Revision, bool, error) {
	st := l.opt.Store
	// Whatever the command left in the page cache is the upper layer's
	// already; reading it back needs no sync.
	up := st.NewUploader()
	defer up.Close()
	cs, err := Changes(ctx, upperDir(l.opt.Dir), l.lower, up)
	if err != nil {
		return core.Revision{}, false, fmt.Errorf("overlay: read the exec's changes: %w", err)
	}
	if len(cs.Ops) == 0 {
		return core.Revision{}, false, nil
	}
	if err := up.Flush(ctx); err != nil {
		return core.Revision{}, false, err
	}
	cs.From = l.base
	info := l.opt.Info
	if info.Source == "" {
		info.Source = core.SourceExec
	}
	info.Base = l.base
	if l.opt.Deliver != nil {
		// What is delivered is read from the draft (by path, at cs.To),
		// which also keeps it if the delivery has to wait.
		keep := fsstore.CommitInfo{Source: core.SourceMount, Tenant: info.Tenant, ExecID: info.ExecID, Message: "checkpoint"}
		cs.From = l.draft.Head
		drev, err := st.Apply(ctx, l.draft.ID, cs, keep)
		if err != nil {
			return core.Revision{}, false, fmt.Errorf("overlay: commit to the draft: %w", err)
		}
		l.keptDraft = true
		cs.From, cs.To = l.draft.Head, drev.Rev
		rev, err := l.opt.Deliver(ctx, l.draft, cs, info)
		if errors.Is(err, ErrKeepDraft) {
			return rev, false, err
		}
		l.keptDraft = false
		if errors.As(err, new(*core.ConflictError)) {
			// The home kept the conflicting changes in a copy of its own.
			return rev, false, &fusefs.ConflictError{Err: err}
		}
		return rev, err == nil, err
	}
	name := fsstore.CopyName(l.ws.Name, "conflict", l.draft.Label)
	res, err := st.ApplyOrKeep(ctx, l.ws.ID, cs, info, name)
	if err != nil {
		return core.Revision{}, false, err
	}
	if len(res.Conflict) > 0 {
		l.target = res.Copy.ID
		return res.Revision, false, &fusefs.ConflictError{ID: res.Copy.ID, Name: res.Copy.Name,
			Err: &core.ConflictError{Base: l.base, Paths: res.Conflict}}
	}
	return res.Revision, true, nil
}

// Status reports where the changes went: the draft (until committed, or
// when it keeps undelivered changes), or a conflict copy; the base
// revision; and the commit's error.
func (l *Layer) Status() (target, base int64, lastErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.target, l.base, l.result
}

// Unmount unmounts the overlay (lazily: a process the container left may
// still hold it) and removes the layer's directory and, unless it keeps
// undelivered changes, its draft. It commits first if Commit was not
// called.
func (l *Layer) Unmount(ctx context.Context) error {
	_, _, cerr := l.Commit(ctx)
	err := unix.Unmount(l.Mountpoint(), unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		err = fmt.Errorf("overlay: unmount %s: %w", l.Mountpoint(), err)
	} else {
		err = nil
	}
	l.release()
	l.mu.Lock()
	keep := l.keptDraft
	l.mu.Unlock()
	if cerr != nil && !keep && !errors.As(cerr, new(*fusefs.ConflictError)) {
		// The commit failed for another reason: the upper layer is all
		// that holds the changes. Leave it for Recover (its volume
		// unmounted; Recover mounts it again).
		if uerr := loopfs.Unmount(filepath.Join(l.opt.Dir, loopfs.VolumeFS)); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return errors.Join(cerr, err)
	}
	if l.recycle() {
		// Its volume went back to the pool.
	} else if rerr := removeLayer(l.opt.Dir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if !keep {
		if derr := l.opt.Store.DeleteWorkspace(context.WithoutCancel(ctx), l.draft.ID); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	return errors.Join(cerr, err)
}

// recycleFiles is how many files and directories an upper layer may hold
// and still be emptied for the next exec: beyond it, removing them costs
// more than a new volume.
const recycleFiles = 1000

// recycle empties the layer's volume and gives it back to the pool, once
// its overlay is unmounted and its changes committed; it reports whether
// it did (otherwise the layer is to be removed).
func (l *Layer) recycle() bool {
	dir := l.opt.Dir
	if l.opt.Pool == nil || !loopfs.IsVolume(dir) {
		return false
	}
	var st unix.Statfs_t
	if unix.Statfs(upperRoot(dir), &st) != nil || st.Files-st.Ffree > recycleFiles {
		return false
	}
	for _, p := range []string{upperDir(dir), workDir(dir), l.Mountpoint(), filepath.Join(dir, recordName)} {
		if err := os.RemoveAll(p); err != nil {
			return false
		}
	}
	return l.opt.Pool.Put(dir, l.opt.UpperSize)
}

// CleanupStale detaches the overlays of the layers under dir (the parent
// of their Dirs) that a process which died left mounted.
func CleanupStale(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	points := map[string]bool{}
	for _, m := range mounts {
		points[m.Point] = true
	}
	var errs []error
	for _, e := range entries {
		// The overlay first, then the volume beneath it.
		for _, mnt := range []string{filepath.Join(dir, e.Name(), "mnt"), filepath.Join(dir, e.Name(), loopfs.VolumeFS)} {
			if points[mnt] {
				if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
					errs = append(errs, fmt.Errorf("overlay: unmount stale %s: %w", mnt, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Recover deals with the layers a previous process left under dir (the
// parent of their Dirs): it unmounts their overlays (CleanupStale) and moves what each
// upper layer holds into its exec's draft, where fusefs.Recover (or an
// executor's pending pushes) commits it as the exec's interrupted
// revision. view must be open. A layer whose draft is gone was committed
// already (only its removal was cut short) and is removed.
func Recover(ctx context.Context, st *fsstore.Store, view *fusefs.View, dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if err := CleanupStale(dir); err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		ld := filepath.Join(dir, e.Name())
		if err := recoverLayer(ctx, st, view, ld); err != nil {
			errs = append(errs, fmt.Errorf("overlay: recover %s: %w", ld, err))
			continue
		}
		if err := removeLayer(ld); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func recoverLayer(ctx context.Context, st *fsstore.Store, view *fusefs.View, ld string) error {
	b, err := os.ReadFile(filepath.Join(ld, recordName))
	if errors.Is(err, os.ErrNotExist) {
		return nil // Open died before the mount: nothing was written
	} else if err != nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("layer record: %w", err)
	}
	d, err := st.WorkspaceByID(ctx, rec.Draft)
	if errors.Is(err, core.ErrWorkspaceNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if d.Head != 1 {
		return nil // the draft already holds the changes
	}
	if loopfs.IsVolume(ld) {
		if err := loopfs.MountVolume(ld); err != nil {
			return err
		}
	}
	lower, release, err := view.Acquire(ctx, rec.Workspace, rec.Base)
	if err != nil {
		return err
	}
	defer release()
	up := st.NewUploader()
	defer up.Close()
	cs, err := Changes(ctx, upperDir(ld), lower, up)
	if err != nil || len(cs.Ops) == 0 {
		return err
	}
	if err := up.Flush(ctx); err != nil {
		return err
	}
	_, err = st.Apply(ctx, rec.Draft, cs, fsstore.CommitInfo{Source: core.SourceMount, Tenant: d.Tenant, Message: "checkpoint"})
	return err
}

// writeFileSync writes a small file and makes it durable.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Recovered reports what RecoverDrafts did with one draft.
type Recovered struct {
	Draft    fsstore.Draft
	Revision core.Revision // the interrupted revision (Rev 0: nothing to commit)
	Kept     string        // on conflict: the workspace now holding the draft
	Err      error
}

// RecoverDrafts commits the drafts that execs left behind when computerd
// died (Recover has moved what their layers held into them), each as one
// revision of its workspace with Source "interrupted", and deletes them. A
// draft whose changes conflict is kept as a workspace instead (Kept). Call
// it at start-up, before any exec starts.
func RecoverDrafts(ctx context.Context, st *fsstore.Store) ([]Recovered, error) {
	drafts, err := st.Drafts(ctx)
	if err != nil {
		return nil, err
	}
	var out []Recovered
	for _, d := range drafts {
		r := Recovered{Draft: d}
		if id, ok := strings.CutPrefix(d.Label, "exec-"); ok {
			if rev, err := st.ExecRevision(ctx, d.Origin, id); err == nil && rev > 0 {
				// Its changes were committed; only the draft's removal was cut short.
				r.Err = st.DeleteWorkspace(ctx, d.ID)
				out = append(out, r)
				continue
			}
		}
		cs, err := st.Diff(ctx, d.ID, 1, d.Head)
		if err == nil && len(cs.Ops) > 0 {
			info := fsstore.CommitInfo{Source: core.SourceInterrupted, Tenant: d.Tenant, Base: d.OriginRev,
				Message: "writes of an interrupted " + d.Label}
			if id, ok := strings.CutPrefix(d.Label, "exec-"); ok {
				info.ExecID = id
			}
			r.Revision, err = st.Apply(ctx, d.Origin, cs, info)
			if errors.As(err, new(*core.ConflictError)) {
				origin, oerr := st.WorkspaceByID(ctx, d.Origin)
				name := fsstore.CopyName(fmt.Sprintf("ws%d", d.Origin), "interrupted", d.Label)
				if oerr == nil {
					name = fsstore.CopyName(origin.Name, "interrupted", d.Label)
				}
				if _, kerr := st.KeepDraft(ctx, d.ID, name); kerr == nil {
					r.Kept = name
				} else {
					err = errors.Join(err, kerr)
				}
			}
		}
		if err == nil {
			err = st.DeleteWorkspace(ctx, d.ID)
		}
		r.Err = err
		out = append(out, r)
	}
	return out, nil
}
