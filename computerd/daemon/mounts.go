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
	"strings"
	"sync"

	"computerd/computerd/fusefs"
	"computerd/computerd/metrics"
	"computerd/core"
	"computerd/fsstore"
	"computerd/wire"
)

// mounts are the host mounts (agentctl mount) this daemon serves. Their
// directories are recorded in a file so a start after a crash can clean up
// the dead mounts the crash left.
type mounts struct {
	store   *fsstore.Store
	metrics *metrics.Metrics
	log     *slog.Logger
	record  string // the file listing live mount directories
	dataDir string

	mu    sync.Mutex
	byDir map[string]*hostMount
}

type hostMount struct {
	m       *fusefs.Mount
	ws      core.Workspace
	pending chan struct{} // a refresh is queued (capacity 1)
}

func newMounts(dataDir string, st *fsstore.Store, m *metrics.Metrics, log *slog.Logger) *mounts {
	return &mounts{store: st, metrics: m, log: log, dataDir: dataDir,
		record: filepath.Join(dataDir, "run", "mounts.json"), byDir: map[string]*hostMount{}}
}

// cleanupStale unmounts what a previous process left mounted.
func (ms *mounts) cleanupStale() {
	var dirs []string
	if b, err := os.ReadFile(ms.record); err == nil {
		json.Unmarshal(b, &dirs)
	}
	for _, d := range dirs {
		if err := fusefs.CleanupStale(d); err != nil {
			ms.log.Warn("stale mount", "dir", d, "err", err)
		} else {
			ms.log.Info("cleaned up a mount left by a previous process", "dir", d)
		}
	}
	os.Remove(ms.record)
}

// save records the live mount directories; ms.mu is held.
func (ms *mounts) save() {
	dirs := make([]string, 0, len(ms.byDir))
	for d := range ms.byDir {
		dirs = append(dirs, d)
	}
	b, _ := json.Marshal(dirs)
	os.MkdirAll(filepath.Dir(ms.record), 0o700)
	tmp := ms.record + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, ms.record)
	}
}

// checkDir accepts an absolute, existing, empty directory outside the data dir.
func (ms *mounts) checkDir(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("mount dir %q: want an absolute path: %w", dir, core.ErrInvalidArgument)
	}
	dir = filepath.Clean(dir)
	if rel, err := filepath.Rel(ms.dataDir, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("mount dir %s is inside the data directory: %w", dir, core.ErrInvalidArgument)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("mount dir: %w: %w", err, core.ErrInvalidArgument)
	}
	if len(ents) > 0 {
		return "", fmt.Errorf("mount dir %s is not empty: %w", dir, core.ErrInvalidArgument)
	}
	return dir, nil
}

// Mount serves ws at dir.
func (ms *mounts) Mount(ctx context.Context, tenant string, ws core.Workspace, dir string) (wire.MountInfo, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if _, busy := ms.byDir[filepath.Clean(dir)]; busy {
		return wire.MountInfo{}, fmt.Errorf("%s is already a mount: %w", dir, core.ErrExists)
	}
	dir, err := ms.checkDir(dir)
	if err != nil {
		return wire.MountInfo{}, err
	}
	m, err := fusefs.Open(dir, fusefs.Options{
		Store: ms.store, Workspace: ws.ID,
		Info:     fsstore.CommitInfo{Source: core.SourceMount, Tenant: tenant, Message: "mount " + dir},
		SpoolDir: filepath.Join(ms.dataDir, "run", "spool"),
		// Its own commits reach the workspace's other mounts; itself it
		// leaves alone (a refresh would commit its pending writes early).
		OnCommit: func(r core.Revision) { ms.metrics.Committed(r); ms.changedBy(ws.ID, dir) },
	})
	if err != nil {
		return wire.MountInfo{}, err
	}
	ms.byDir[dir] = &hostMount{m: m, ws: ws, pending: make(chan struct{}, 1)}
	ms.save()
	return ms.info(dir, ms.byDir[dir]), nil
}

func (ms *mounts) info(dir string, h *hostMount) wire.MountInfo {
	_, base, err := h.m.Status()
	mi := wire.MountInfo{Dir: dir, Workspace: h.ws.Name, Base: base}
	if err != nil {
		mi.Error = err.Error()
	}
	return mi
}

// Unmount commits what is pending at dir and unmounts it.
func (ms *mounts) Unmount(ctx context.Context, tenant, dir string) error {
	dir = filepath.Clean(dir)
	ms.mu.Lock()
	h, ok := ms.byDir[dir]
	if !ok || h.ws.Tenant != tenant {
		ms.mu.Unlock()
		return fmt.Errorf("%s is not a mount of yours: %w", dir, core.ErrNotFound)
	}
	delete(ms.byDir, dir)
	ms.save()
	ms.mu.Unlock()
	return h.m.Unmount(ctx)
}

// Mounts lists tenant's live mounts.
func (ms *mounts) Mounts(tenant string) []wire.MountInfo {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := []wire.MountInfo{}
	for dir, h := range ms.byDir {
		if h.ws.Tenant == tenant {
			out = append(out, ms.info(dir, h))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out
}

// changed brings the mounts of ws up to its head, in the background: a
// commit made elsewhere (API, exec, sync) becomes visible in them.
func (ms *mounts) changed(ws int64) { ms.changedBy(ws, "") }

// changedBy is changed for a commit made by the mount at dir ("" for none),
// which is not refreshed.
func (ms *mounts) changedBy(ws int64, dir string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for d, h := range ms.byDir {
		if h.ws.ID != ws || d == dir {
			continue
		}
		select {
		case h.pending <- struct{}{}:
			go func() {
				<-h.pending
				if err := h.m.Refresh(context.Background()); err != nil && !errors.Is(err, fusefs.ErrUnmounted) {
					ms.log.Warn("refresh mount", "dir", h.m.Dir(), "err", err)
				}
			}()
		default: // a refresh is queued already; it will see this commit too
		}
	}
}

// closeAll unmounts everything (at shutdown), committing what is pending.
func (ms *mounts) closeAll(ctx context.Context) {
	ms.mu.Lock()
	all := ms.byDir
	ms.byDir = map[string]*hostMount{}
	ms.save()
	ms.mu.Unlock()
	for dir, h := range all {
		if err := h.m.Unmount(ctx); err != nil {
			ms.log.Warn("unmount at shutdown", "dir", dir, "err", err)
		}
	}
}
