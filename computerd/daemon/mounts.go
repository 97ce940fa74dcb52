package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"computerd/computerd/fusefs"
	"computerd/computerd/metrics"
	"computerd/core"
	"computerd/fsstore"
	"computerd/internal/durable"
	"computerd/wire"
)

// mounts are the host mounts (agentctl mount) this daemon serves. Their
// directories and unique mount ids are recorded in a file so a start
// after a crash can clean up the dead mounts the crash left, and those
// alone: a mount is unmounted only if its directory still shows it
// (fusefs.MountPoint), never because of what its path leads to.
//
// The store's commit hook (changed) takes no lock: it runs in the store's
// single writer, and a lock it waited on could be held by a goroutine that
// itself waits on the writer, through the kernel (a mount(2) or a lookup
// of the mount directory served by a FUSE mount of this daemon, whose
// handler commits). It reads the mounts from live and wakes each mount's
// refresh loop. mu is never held across a kernel mount or unmount, nor
// across a call into a mount.
type mounts struct {
	store   *fsstore.Store
	metrics *metrics.Metrics
	log     *slog.Logger
	record  string // the file listing live mount directories
	dataDir string
	policy  *mountPolicy

	// Between Open and Close: the refresh loops run in group, under ctx.
	group  errgroup.Group
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	byDir    map[string]*hostMount // also those being mounted (m nil)
	closed   bool
	mounting sync.WaitGroup // Mount calls between their reservation and their end

	live atomic.Pointer[[]*hostMount] // the mounted ones, for the commit hook
}

type hostMount struct {
	dir     string
	m       *fusefs.Mount // nil while it is being mounted
	id      uint64        // its unique mount id (fusefs.MountPoint.ID), once mounted
	ws      core.Workspace
	pending chan struct{} // a refresh is due (capacity 1)
	stop    chan struct{} // closed when it is unmounted: its refresh loop ends
	done    chan struct{} // closed when its refresh loop has ended
}

// errMountsClosed refuses a mount while the daemon stops.
var errMountsClosed = fmt.Errorf("mount: computerd is shutting down: %w", core.ErrClosed)

// mountRecord is an entry of the record of mounts: a mount's directory
// and unique id (0 while it is being mounted).
type mountRecord struct {
	Dir string `json:"dir"`
	ID  uint64 `json:"id,omitempty"`
}

func newMounts(dataDir string, policy *mountPolicy, st *fsstore.Store, m *metrics.Metrics, log *slog.Logger) *mounts {
	return &mounts{store: st, metrics: m, log: log, dataDir: dataDir, policy: policy,
		record: filepath.Join(runDir(dataDir), "mounts.json"), byDir: map[string]*hostMount{}}
}

// Open unmounts what a previous process left mounted and makes the
// manager ready for mounts. Close ends what it starts.
func (ms *mounts) Open(ctx context.Context) error {
	ms.cleanupStale()
	// The runner makes it too, but a daemon without exec mounts all the same.
	if err := os.MkdirAll(ms.spoolDir(), 0o700); err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	// The refresh loops outlive the call that opens the manager.
	ms.ctx, ms.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	return nil
}

// Close refuses new mounts, waits for those being made, unmounts every
// mount (committing what is pending), and waits for the refresh loops.
func (ms *mounts) Close(ctx context.Context) error {
	ms.mu.Lock()
	ms.closed = true
	ms.mu.Unlock()
	ms.mounting.Wait()
	ms.mu.Lock()
	all := ms.byDir
	ms.byDir = map[string]*hostMount{}
	ms.publish()
	ms.mu.Unlock()
	for dir, h := range all {
		if err := h.m.Unmount(ctx); errors.Is(err, fusefs.ErrMountGone) {
			ms.log.Warn("at shutdown a mount was no longer on its directory: left what is there alone", "dir", dir, "err", err)
		} else if err != nil {
			ms.log.Warn("unmount at shutdown", "dir", dir, "err", err)
		}
	}
	if ms.cancel != nil {
		ms.cancel(errMountsClosed)
	}
	return ms.group.Wait()
}

func (ms *mounts) spoolDir() string { return filepath.Join(runDir(ms.dataDir), "spool") }

// cleanupStale unmounts what a previous process left mounted: the mounts
// it recorded, each if its directory still shows it.
func (ms *mounts) cleanupStale() {
	for _, r := range ms.readRecord() {
		switch ok, err := fusefs.UnmountStale(r.Dir, r.ID); {
		case errors.Is(err, fusefs.ErrMountGone):
			ms.log.Warn("a mount left by a previous process is no longer on its directory (someone else unmounted it or mounted over it): left what is there alone", "dir", r.Dir)
		case err != nil:
			ms.log.Warn("stale mount", "dir", r.Dir, "err", err)
		case ok:
			ms.log.Info("cleaned up a mount left by a previous process", "dir", r.Dir)
		}
	}
	os.Remove(ms.record)
}

// readRecord reads the record of mounts. A record of an earlier version
// lists directories alone: their entries have id 0.
func (ms *mounts) readRecord() []mountRecord {
	b, err := os.ReadFile(ms.record)
	if err != nil {
		return nil
	}
	var records []mountRecord
	if json.Unmarshal(b, &records) == nil {
		return records
	}
	records = nil
	var dirs []string
	json.Unmarshal(b, &dirs)
	for _, d := range dirs {
		records = append(records, mountRecord{Dir: d})
	}
	return records
}

// publish records the mount directories (those being mounted too, so that
// a crash in the middle leaves nothing the next start does not clean up)
// and gives the commit hook the mounted ones; ms.mu is held.
func (ms *mounts) publish() {
	live := make([]*hostMount, 0, len(ms.byDir))
	for _, h := range ms.byDir {
		if h.m != nil {
			live = append(live, h)
		}
	}
	ms.live.Store(&live)
	ms.save()
}

// save records the mount directories and ids; ms.mu is held.
func (ms *mounts) save() {
	records := make([]mountRecord, 0, len(ms.byDir))
	for d, h := range ms.byDir {
		records = append(records, mountRecord{Dir: d, ID: h.id})
	}
	b, _ := json.Marshal(records)
	os.MkdirAll(filepath.Dir(ms.record), 0o700)
	if err := durable.WriteFile(ms.record, b); err != nil {
		ms.log.Warn("record the host mounts", "err", err)
	}
}

// reserve takes dir (clean) for a mount about to be made; ms.mu is held.
func (ms *mounts) reserve(dir string) error {
	if ms.closed {
		return errMountsClosed
	}
	if _, busy := ms.byDir[dir]; busy {
		return fmt.Errorf("%s is already a mount: %w", dir, core.ErrExists)
	}
	return nil
}

// Mount serves ws at dir, if the policy allows it there; a refusal leaves
// nothing behind (no mount, no record, no directory).
func (ms *mounts) Mount(ctx context.Context, tenant string, ws core.Workspace, dir string) (wire.MountInfo, error) {
	key := filepath.Clean(dir)
	ms.mu.Lock()
	err := ms.reserve(key)
	ms.mu.Unlock()
	if err != nil {
		return wire.MountInfo{}, err
	}
	// Unlocked: resolving the directory and mounting on it go through the
	// kernel, which may ask a FUSE server (a mount of this daemon, even)
	// that waits on the store's writer, which may be in the commit hook.
	at, err := ms.policy.open(dir)
	if err != nil {
		return wire.MountInfo{}, err
	}
	ms.mu.Lock()
	if err := ms.reserve(key); err != nil {
		ms.mu.Unlock()
		at.Close()
		return wire.MountInfo{}, err
	}
	h := &hostMount{dir: key, ws: ws, pending: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	ms.byDir[key] = h
	ms.publish()
	ms.mounting.Add(1)
	ms.mu.Unlock()
	defer ms.mounting.Done()

	m, err := ms.mount(tenant, ws, key, at)
	ms.mu.Lock()
	if err != nil {
		delete(ms.byDir, key)
		ms.publish()
		ms.mu.Unlock()
		if errors.Is(err, fusefs.ErrMountPoint) {
			return wire.MountInfo{}, mountPointRefused(key)
		}
		return wire.MountInfo{}, err
	}
	h.m, h.id = m, at.ID()
	ms.publish()
	ms.group.Go(func() error { ms.refreshLoop(h); return nil })
	ms.mu.Unlock()
	return ms.info(h), nil
}

// mount mounts ws on dir, opened as at.
func (ms *mounts) mount(tenant string, ws core.Workspace, dir string, at *fusefs.MountPoint) (*fusefs.Mount, error) {
	return fusefs.Open(dir, fusefs.Options{
		Store: ms.store, Workspace: ws.ID, At: at,
		Info:     fsstore.CommitInfo{Source: core.SourceMount, Tenant: tenant, Message: "mount " + dir},
		SpoolDir: ms.spoolDir(),
		// The tenant's byte quota binds its writes as they are made.
		Remaining: func(ctx context.Context) (int64, error) { return ms.store.Remaining(ctx, tenant) },
		// Its own commits reach the workspace's other mounts; itself it
		// leaves alone (a refresh would commit its pending writes early).
		OnCommit: func(r core.Revision) { ms.metrics.Committed(r); ms.changedBy(ws.ID, dir) },
	})
}

// info describes h; ms.mu must not be held (it asks the mount).
func (ms *mounts) info(h *hostMount) wire.MountInfo {
	_, base, err := h.m.Status()
	mi := wire.MountInfo{Dir: h.dir, Workspace: h.ws.Name, Base: base}
	if err != nil {
		mi.Error = err.Error()
	}
	return mi
}

// Unmount commits what is pending at dir and unmounts it. If dir no
// longer shows the mount (someone else unmounted it, or mounted over
// it), it unmounts nothing, forgets the mount all the same, and says so
// (404, not_found).
func (ms *mounts) Unmount(ctx context.Context, tenant, dir string) error {
	dir = filepath.Clean(dir)
	ms.mu.Lock()
	h, ok := ms.byDir[dir]
	if !ok || h.m == nil || h.ws.Tenant != tenant {
		ms.mu.Unlock()
		return fmt.Errorf("%s is not a mount of yours: %w", dir, core.ErrNotFound)
	}
	delete(ms.byDir, dir)
	ms.publish()
	ms.mu.Unlock()
	close(h.stop)
	err := h.m.Unmount(ctx)
	select {
	case <-h.done:
	case <-ctx.Done(): // a refresh stuck in the kernel; Close waits for it
	}
	if errors.Is(err, fusefs.ErrMountGone) {
		return fmt.Errorf("unmount %s: nothing was unmounted, and computerd no longer serves the mount: %w: %w", dir, err, core.ErrNotFound)
	}
	return err
}

// Mounts lists tenant's live mounts.
func (ms *mounts) Mounts(tenant string) []wire.MountInfo {
	ms.mu.Lock()
	var mine []*hostMount
	for _, h := range ms.byDir {
		if h.m != nil && h.ws.Tenant == tenant {
			mine = append(mine, h)
		}
	}
	ms.mu.Unlock()
	out := make([]wire.MountInfo, 0, len(mine))
	for _, h := range mine {
		out = append(out, ms.info(h))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

// changed is the store's commit hook: it brings the mounts of ws up to
// its head, in the background, so that a commit made elsewhere (API,
// exec, sync) becomes visible in them. It never blocks.
func (ms *mounts) changed(ws int64) { ms.changedBy(ws, "") }

// changedBy is changed for a commit made by the mount at dir ("" for none),
// which is not refreshed.
func (ms *mounts) changedBy(ws int64, dir string) {
	live := ms.live.Load()
	if live == nil {
		return
	}
	for _, h := range *live {
		if h.ws.ID != ws || h.dir == dir {
			continue
		}
		select {
		case h.pending <- struct{}{}:
		default: // a refresh is due already; it will see this commit too
		}
	}
}

// refreshLoop refreshes h each time a commit made elsewhere is due, until
// h is unmounted or the manager closes.
func (ms *mounts) refreshLoop(h *hostMount) {
	defer close(h.done)
	for {
		select {
		case <-h.stop:
			return
		case <-ms.ctx.Done():
			return
		case <-h.pending:
		}
		if err := h.m.Refresh(ms.ctx); err != nil && !errors.Is(err, fusefs.ErrUnmounted) {
			ms.log.Warn("refresh mount", "dir", h.dir, "err", err)
		}
	}
}
