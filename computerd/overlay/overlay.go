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
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"computerd/computerd/fusefs"
	"computerd/computerd/idmap"
	"computerd/computerd/loopfs"
	"computerd/computerd/mountinfo"
	"computerd/core"
	"computerd/fsstore"
	"computerd/internal/durable"
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
	// Mounts, if set, are what the layer is made from (Dir must be in
	// their layers directory): the overlay then shows the store's ids as
	// a container with their ids expects them, for a sandbox.Spec with
	// WorkspaceMapped. Nil: the layers as they are.
	Mounts *Mounts
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
	// Shelf, if set, may hold an untouched layer of an earlier exec on
	// the same revision, which Open then gives this exec instead of
	// mounting a new one (its Dir is then that layer's, not Dir).
	Shelf *Shelf
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

	// upperMtime and upperCtime are the upper directory's times once
	// mounted (Shelf: a layer whose upper directory kept them is untouched).
	upperMtime, upperCtime unix.Timespec

	mu        sync.Mutex
	committed bool
	keptDraft bool  // the draft holds the changes: keep it
	result    error // of the commit
	reused    bool  // taken from a Shelf
	target    int64
}

// Open makes the layer's directories, a draft that pins the base revision
// (and takes the changes if they cannot be delivered), and mounts the
// overlay at Mountpoint.
func Open(ctx context.Context, opt Options) (_ *Layer, err error) {
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
	if l := opt.Shelf.take(ws.ID, base, opt); l != nil {
		if err := l.reuse(ctx, ws, opt, label); err == nil {
			return l, nil
		}
		opt.Shelf.drop(l)
	}
	draft, err := opt.Store.CreateDraft(ctx, ws.ID, base, label)
	if err != nil {
		return nil, fmt.Errorf("overlay: draft of %s: %w", ws.Name, err)
	}
	l := &Layer{opt: opt, ws: ws, base: base, draft: draft, target: draft.ID}
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
	if err := makeLayerDirs(opt.Dir); err != nil {
		return nil, err
	}
	if err := writeRecord(filepath.Join(opt.Dir, recordName), record{Workspace: ws.ID, Base: base, Draft: draft.ID, Label: label}); err != nil {
		return nil, err
	}
	if err := mount(l.lower, opt.Dir, opt.Mounts); err != nil {
		return nil, err
	}
	if err := l.stampUpper(); err != nil {
		return nil, err
	}
	return l, nil
}

// writeRecord writes a layer's record durably.
func writeRecord(path string, rec record) error {
	b, _ := json.Marshal(rec)
	if err := durable.WriteFile(path, b); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
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

// Mounts are what every exec's overlay is made from: detached copies
// (open_tree) of the mount of the revision view and of the mount of the
// directory that holds the layers' directories, idmapped with the
// containers' ids. Through them the overlay shows the store's id i as
// host id ids.Base+i (the container's i), and what a container's id i
// writes lands in the upper layer as i, so the upper layer (which Changes
// reads directly) holds the store's ids. The copies are made once, not
// per exec: the release of a detached copy waits for an RCU grace period,
// which shows in the tail of an exec's mount (BenchmarkMount).
type Mounts struct {
	ids       idmap.Range
	viewDir   string
	layersDir string
	view      int // descriptors of the copies
	layers    int
}

// OpenMounts makes the copies of the mounts at viewDir (a fusefs.View's
// directory) and layersDir (the parent of the layers' Dirs), idmapped
// with ids. Close them before the view is unmounted: a copy keeps its
// FUSE connection alive.
func OpenMounts(viewDir, layersDir string, ids idmap.Range) (*Mounts, error) {
	ns, err := ids.Userns()
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	m := &Mounts{ids: ids, viewDir: viewDir, layersDir: layersDir, view: -1, layers: -1}
	if m.view, err = detachedCopy(viewDir, int(ns.Fd())); err != nil {
		return nil, err
	}
	if m.layers, err = detachedCopy(layersDir, int(ns.Fd())); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close releases the copies (layers mounted from them keep theirs).
func (m *Mounts) Close() error {
	for _, fd := range []*int{&m.view, &m.layers} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	return nil
}

// open opens path, under dir, through the copy tree of dir's mount.
func open(tree int, dir, path string) (int, error) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return -1, fmt.Errorf("overlay: %s is not under %s", path, dir)
	}
	fd, err := unix.Openat(tree, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("overlay: open %s: %w", path, err)
	}
	return fd, nil
}

// MountPlain mounts at dir/mnt an overlay of the directory lower with an
// upper layer in dir, made as Open makes an exec's (the same options, the
// layers given through ms's copies), over a plain directory rather than a
// revision: the workload bench's reference for what overlayfs itself
// costs. dir must be in ms's layers directory and lower under its view
// directory; dir's upper, work and mnt directories are made here.
// Unmount dir/mnt and remove dir when done.
func MountPlain(lower, dir string, ms *Mounts) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if err := makeLayerDirs(dir); err != nil {
		return err
	}
	return mount(lower, dir, ms)
}

// makeLayerDirs makes layer dir's upper, work and mount directories.
func makeLayerDirs(dir string) error {
	for _, sub := range []string{upperDir(dir), workDir(dir), filepath.Join(dir, "mnt")} {
		if err := os.Mkdir(sub, 0o755); err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
	}
	return nil
}

// mount mounts the overlay of lower and dir's upper layer at dir/mnt,
// from ms (nil: from copies of their own, not idmapped).
//
// The layers are given to overlayfs as descriptors of detached copies of
// their mounts (fsconfig's "lowerdir+", "upperdir" and "workdir" take
// descriptors), not as paths: the mount's options, which every
// /proc/PID/mountinfo shows, then name the layers by their paths in those
// copies ("/W-L3", "/x1/upper", ...), never by the host's (the data
// directory's) paths.
func mount(lower, dir string, ms *Mounts) error {
	var ids idmap.Range
	if ms == nil {
		// The upper and work directories must be on one mount.
		lowerTree, err := detachedCopy(lower, -1)
		if err != nil {
			return err
		}
		defer unix.Close(lowerTree)
		layerTree, err := detachedCopy(upperRoot(dir), -1)
		if err != nil {
			return err
		}
		defer unix.Close(layerTree)
		ms = &Mounts{viewDir: lower, layersDir: upperRoot(dir), view: lowerTree, layers: layerTree}
	} else {
		ids = ms.ids
		if loopfs.IsVolume(dir) {
			// The layer's volume is a mount of its own, made after ms's
			// copy of the layers directory (which does not show it): its
			// upper and work directories are given through an idmapped
			// copy of the volume's mount.
			ns, err := ids.Userns()
			if err != nil {
				return fmt.Errorf("overlay: %w", err)
			}
			volumeTree, err := detachedCopy(upperRoot(dir), int(ns.Fd()))
			if err != nil {
				return err
			}
			defer unix.Close(volumeTree)
			ms = &Mounts{ids: ids, viewDir: ms.viewDir, view: ms.view, layersDir: upperRoot(dir), layers: volumeTree}
		}
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("overlay: fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	for _, layer := range []struct{ key, path string }{
		{"lowerdir+", lower}, {"upperdir", upperDir(dir)}, {"workdir", workDir(dir)},
	} {
		tree, under := ms.layers, ms.layersDir
		if layer.key == "lowerdir+" {
			tree, under = ms.view, ms.viewDir
		}
		fd, err := open(tree, under, layer.path)
		if err != nil {
			return err
		}
		err = unix.FsconfigSetFd(fsfd, layer.key, fd)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("overlay: %s %s: %w", layer.key, layer.path, err)
		}
	}
	// redirect_dir off: renaming a directory of the lower layer fails with
	// EXDEV, which mv, cp and package managers answer by copying (as in
	// Docker's default); index and metacopy off: the upper layer holds
	// whole files, nothing the changeset has to chase.
	for _, opt := range []string{"redirect_dir", "index", "metacopy"} {
		if err := unix.FsconfigSetString(fsfd, opt, "off"); err != nil {
			return fmt.Errorf("overlay: %s=off: %w", opt, err)
		}
	}
	if err := createAs(fsfd, ids); err != nil {
		return fmt.Errorf("overlay: mount over %s: %w", lower, err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("overlay: fsmount: %w", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, filepath.Join(dir, "mnt"), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("overlay: move_mount: %w", err)
	}
	return nil
}

// detachedCopy returns a descriptor of a detached copy of the mount at
// dir (open_tree), idmapped with the user namespace ns if it is not -1.
func detachedCopy(dir string, ns int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("overlay: open_tree %s: %w", dir, err)
	}
	if ns >= 0 {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("overlay: idmap %s: %w", dir, err)
		}
	}
	return fd, nil
}

// createAs creates the overlay's superblock. overlayfs does all its work
// on the layers (copy-up, the work directory's files, whiteouts) with
// the credentials of the task that created it; with ids, that task's
// filesystem ids are the container's root (ids.Base), whose files the
// idmapped upper layer can store (as 0), where host root's could not be
// (EOVERFLOW). Its capabilities stay those of host root. It runs on a
// thread of its own, which ends with it.
func createAs(fsfd int, ids idmap.Range) error {
	if ids == (idmap.Range{}) {
		return unix.FsconfigCreate(fsfd)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's credentials change
		// setfsuid and setfsgid change this thread only (the raw system
		// calls, unlike syscall.Setuid, are not applied to every thread).
		unix.Setfsgid(int(ids.Base))
		unix.Setfsuid(int(ids.Base))
		// Leaving fsuid 0 clears the file capabilities from the effective
		// set; they are still permitted.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var caps [2]unix.CapUserData
		if err := unix.Capget(&hdr, &caps[0]); err != nil {
			done <- fmt.Errorf("capget: %w", err)
			return
		}
		caps[0].Effective, caps[1].Effective = caps[0].Permitted, caps[1].Permitted
		if err := unix.Capset(&hdr, &caps[0]); err != nil {
			done <- fmt.Errorf("capset: %w", err)
			return
		}
		done <- unix.FsconfigCreate(fsfd)
	}()
	return <-done
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
	lower, err := st.Snapshot(ctx, l.ws.ID, l.base) // the draft keeps it
	if err != nil {
		return core.Revision{}, false, fmt.Errorf("overlay: base revision: %w", err)
	}
	cs, err := Changes(ctx, upperDir(l.opt.Dir), lower, up)
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
	// The workspace was deleted meanwhile: nothing of the exec's is
	// wanted any more (its draft, if the store has not dropped it with
	// the workspace, goes below).
	if errors.Is(cerr, core.ErrWorkspaceNotFound) {
		cerr = nil
	}
	if cerr != nil && !keep && !errors.As(cerr, new(*fusefs.ConflictError)) {
		// The commit failed for another reason: the upper layer is all
		// that holds the changes. Leave it for Recover (its volume
		// unmounted; Recover mounts it again).
		if uerr := loopfs.Unmount(filepath.Join(l.opt.Dir, loopfs.VolumeFS)); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return errors.Join(cerr, err)
	}
	// The record goes first: a removal cut short (SIGKILL) never leaves a
	// record whose upper layer is gone in part.
	if rerr := os.Remove(filepath.Join(l.opt.Dir, recordName)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if l.recycle() {
		// Its volume went back to the pool.
	} else if rerr := removeLayer(l.opt.Dir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if !keep {
		if derr := l.opt.Store.DeleteWorkspace(context.WithoutCancel(ctx), l.draft.ID); derr != nil && !errors.Is(derr, core.ErrWorkspaceNotFound) {
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
// upper layer holds into its exec's draft, where RecoverDrafts (or an
// executor's pending pushes) commits it as the exec's interrupted
// revision. A layer whose draft is gone was committed already (only its
// removal was cut short) and is removed.
func Recover(ctx context.Context, st *fsstore.Store, dir string) error {
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
		if err := recoverLayer(ctx, st, ld); err != nil {
			errs = append(errs, fmt.Errorf("overlay: recover %s: %w", ld, err))
			continue
		}
		if err := removeLayer(ld); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func recoverLayer(ctx context.Context, st *fsstore.Store, ld string) error {
	b, err := os.ReadFile(filepath.Join(ld, recordName))
	if errors.Is(err, os.ErrNotExist) {
		return nil // Open died before the mount: nothing was written
	} else if err != nil {
		return err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Draft == 0 {
		// Only a build that wrote the record in place could leave a
		// part of one (a kill while writing it); the overlay is mounted
		// after the whole record is written, so nothing was written.
		return nil
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
	if _, err := os.Stat(upperDir(ld)); errors.Is(err, os.ErrNotExist) {
		return nil // a removal cut short, by a build that removed the record last: the layer was done with
	}
	lower, err := st.Snapshot(ctx, rec.Workspace, rec.Base) // the draft keeps it
	if err != nil {
		return err
	}
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
