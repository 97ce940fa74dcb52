// Package fusefs serves one workspace of an fsstore.Store as a directory
// through FUSE: a host mount (agentctl mount) or an exec's /workspace.
//
// The mount keeps its changes in memory (metadata) and in a sparse spool
// file (dirty chunks) over a snapshot of the store, and commits them with
// fsstore.Store.CommitNodes: addressed by inode, with inode numbers
// reserved in advance, so the numbers the kernel holds stay valid across
// commits. See docs/FUSE.md for when revisions are made.
package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"computerd/computerd/mountinfo"
	"computerd/computerd/procfd"
	"computerd/core"
	"computerd/fsstore"
)

// Options configures a Mount.
type Options struct {
	// Store and Workspace (an id) say what to serve.
	Store     *fsstore.Store
	Workspace int64
	// BaseRev is the revision the mount starts from (0: the head).
	BaseRev int64
	// Info is the template for the revisions the mount commits; Source
	// defaults to fsstore.SourceMount.
	Info fsstore.CommitInfo
	// QuietPeriod is how long after the last change the mount commits by
	// itself. Zero means 2s; negative disables it.
	QuietPeriod time.Duration
	// OnCommit, if set, is called after each revision of Workspace the
	// mount makes.
	OnCommit func(core.Revision)
	// CacheTimeout is how long the kernel may cache entries and attributes
	// (default 24h): the mount invalidates them itself when others change
	// the workspace (Refresh).
	CacheTimeout time.Duration
	// SpoolDir holds the spool file of dirty chunks (default os.TempDir()).
	SpoolDir string
	// CacheBytes is how much of the spool may keep copies of chunks after
	// they are committed, so reading back what was just written does not go
	// to the database (default 256 MiB; negative: none).
	CacheBytes int64
	// Debug logs every FUSE request, to Logger (default: the standard
	// logger).
	Debug  bool
	Logger *log.Logger
	// At, if set, is dir opened (see MountPoint): the mount is made on it
	// and removed through it, not through dir's path. Open takes it over
	// (closes it when the mount ends, or when Open fails).
	At *MountPoint
	// Remaining, if set, says how many bytes the workspace's tenant may
	// still add to what it stores (fsstore.Store.Remaining): a write that
	// would take the mount's uncommitted bytes past it fails with EDQUOT,
	// since the mount's commits, of writes already answered, are not
	// refused. It is asked when the mount opens and after each commit.
	Remaining func(context.Context) (int64, error)
}

// Errors.
var (
	// ErrUnmounted: the mount has been unmounted.
	ErrUnmounted = errors.New("fusefs: unmounted")
	// ErrMountGone: the directory of a mount made through a MountPoint no
	// longer shows it (someone else unmounted it, or mounted over it);
	// nothing there was unmounted.
	ErrMountGone = errors.New("fusefs: the mount is no longer on its directory (someone else unmounted it or mounted over it)")
	// ErrMountPoint: the directory a MountPoint was to mount on had a
	// mount on it by the time the mount was made; nothing was mounted.
	ErrMountPoint = errors.New("fusefs: the directory is a mount point")
)

// mountName is the subtype of the mounts' file system type (fuse.computerd).
const mountName = "computerd"

// ConflictError reports a commit refused because the workspace changed the
// same paths since the mount's base. The mount's version was kept whole as
// workspace Name (id ID) of the same tenant, and the mount now serves and
// commits to that workspace. It unwraps to the store's *ConflictError.
type ConflictError struct {
	ID   int64
	Name string
	Err  error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v (the mount's version is kept as workspace %q)", e.Err, e.Name)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// Mount is a workspace served at a directory.
type Mount struct {
	mountDir string
	opt      Options
	st       *fsstore.Store
	ctx      context.Context // for requests from the kernel
	cancel   context.CancelFunc
	server   *fuse.Server
	dev      uint64 // the mount's device number: its FUSE connection is minor(dev)
	chunk    int64
	page     int64 // the kernel's page size
	ttl      time.Duration
	quiet    time.Duration

	syncMu sync.Mutex // serialises commits, so fsync waits for one in flight
	// bg holds the mount's goroutines other than the server's: the
	// invalidations sent after an fsync was answered, the quiet-period
	// commits. Unmount waits for them once the server has ended.
	bg sync.WaitGroup

	mu         sync.Mutex
	ws         core.Workspace // the workspace published to
	target     int64          // the workspace commits go to: ws, or a conflict copy
	base       int64          // target's revision the snapshot shows
	snap       *fsstore.Snapshot
	rootIno    uint64
	nodes      map[uint64]*node
	touched    map[uint64]*node
	log        []fsstore.NodeOp
	logInos    [][2]uint64 // the inodes each log op concerns
	spool      *spool
	inoNext    uint64
	inoEnd     uint64
	timer      *time.Timer
	dirtySince time.Time      // when the oldest pending change was made
	chunks     [8]cachedChunk // recently read committed chunks
	cacheQ     []cacheRef     // spool copies of committed chunks, oldest first
	cacheSlots int
	cacheMax   int // slots
	nextChunk  int
	closed     bool
	lastErr    error  // of the last commit made by the quiet timer
	left       int64  // Remaining's answer at the last commit
	written    int64  // bytes written since the last commit
	lastFh     uint64 // the last file handle given to a descriptor that made a file

}

// Open serves opt.Workspace at dir, which must exist. Call Unmount when
// done. The mount is nosuid and nodev.
func Open(dir string, opt Options) (*Mount, error) {
	if opt.Store == nil {
		if opt.At != nil {
			opt.At.Close()
		}
		return nil, fmt.Errorf("fusefs: no store")
	}
	// The mount's own context, for the requests the kernel sends it:
	// Unmount cancels it once the server and bg have ended.
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mount{mountDir: dir, opt: opt, st: opt.Store, ctx: ctx, cancel: cancel, chunk: opt.Store.ChunkSizeBytes(), page: int64(os.Getpagesize()),
		ttl: opt.CacheTimeout, quiet: opt.QuietPeriod, nodes: map[uint64]*node{}, touched: map[uint64]*node{}}
	if m.ttl <= 0 {
		m.ttl = 24 * time.Hour
	}
	if m.quiet == 0 {
		m.quiet = 2 * time.Second
	}
	switch {
	case opt.CacheBytes == 0:
		m.cacheMax = int(256 << 20 / m.chunk)
	case opt.CacheBytes > 0:
		m.cacheMax = int(opt.CacheBytes / m.chunk)
	}
	if m.opt.Info.Source == "" {
		m.opt.Info.Source = core.SourceMount
	}
	err := m.open(dir)
	if err != nil {
		cancel()
		if m.spool != nil {
			m.spool.close()
		}
		if opt.At != nil {
			opt.At.Close()
		}
		return nil, err
	}
	return m, nil
}

func (m *Mount) open(dir string) error {
	ctx := m.ctx
	ws, err := m.st.WorkspaceByID(ctx, m.opt.Workspace)
	if err != nil {
		return fmt.Errorf("fusefs: workspace %d: %w", m.opt.Workspace, err)
	}
	m.ws = ws
	base := m.opt.BaseRev
	if base == core.Head {
		base = ws.Head
	}
	m.target, m.base = ws.ID, base
	if m.snap, err = m.st.Snapshot(ctx, m.target, m.base); err != nil {
		return fmt.Errorf("fusefs: snapshot: %w", err)
	}
	m.rootIno = m.snap.RootIno()
	root, err := m.node(m.rootIno)
	if err != nil {
		return fmt.Errorf("fusefs: root: %w", err)
	}
	root.lookups = 1
	m.refreshQuota(ctx)
	if m.spool, err = newSpool(m.opt.SpoolDir, m.chunk); err != nil {
		return err
	}
	opts := &fuse.MountOptions{
		FsName:                   "computerd:" + ws.Name,
		Name:                     mountName,
		DirectMount:              true,
		DirectMountStrict:        true,
		DirectMountFlags:         hostMountFlags,
		AllowOther:               true,
		Options:                  []string{"default_permissions"},
		MaxWrite:                 1 << 20,
		MaxReadAhead:             1 << 20,
		DisableXAttrs:            true,
		DisableSplice:            true, // 1 MiB replies exceed a pipe: splice would fail, then copy
		EnableSymlinkCaching:     true,
		ExplicitDataCacheControl: true,
		Debug:                    m.opt.Debug,
		Logger:                   m.opt.Logger,
	}
	if at := m.opt.At; at != nil {
		return m.openAt(at, opts)
	}
	server, err := fuse.NewServer(&fsys{RawFileSystem: fuse.NewDefaultRawFileSystem(), m: m}, dir, opts)
	if err != nil {
		return fmt.Errorf("fusefs: mount %s: %w", dir, err)
	}
	m.server = server
	closeOnExecFuse()
	go server.Serve() // ends with the FUSE connection; Unmount waits for it (server.Wait)
	if err := server.WaitMount(); err != nil {
		server.Unmount()
		return fmt.Errorf("fusefs: mount %s: %w", dir, err)
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil {
		m.dev = st.Dev
	}
	raiseReadahead(m.dev)
	return nil
}

// openAt mounts on at (Options.At): the kernel mount is made here, and
// go-fuse serves the connection it was made with.
func (m *Mount) openAt(at *MountPoint, opts *fuse.MountOptions) error {
	conn, err := at.mount(opts)
	if err != nil {
		return fmt.Errorf("fusefs: mount %s: %w", m.mountDir, err)
	}
	opts.DirectMount, opts.DirectMountStrict = false, false
	server, err := fuse.NewServer(&fsys{RawFileSystem: fuse.NewDefaultRawFileSystem(), m: m}, conn, opts)
	if err != nil {
		at.unmount()
		return fmt.Errorf("fusefs: mount %s: %w", m.mountDir, err)
	}
	m.server = server
	go server.Serve() // ends with the FUSE connection; Unmount waits for it (server.Wait)
	root, err := at.openRoot()
	if err != nil {
		at.unmount()
		server.Wait()
		return fmt.Errorf("fusefs: mount %s: open its root: %w", m.mountDir, err)
	}
	pollHack(root)
	var st unix.Stat_t
	if unix.Fstat(root, &st) == nil {
		m.dev = st.Dev
	}
	unix.Close(root)
	raiseReadahead(m.dev)
	return nil
}

// abortGrace is how long Unmount waits for the kernel to end the FUSE
// connection before aborting it.
const abortGrace = time.Second

// unmountKernel unmounts (lazily if busy) and waits for the server's loops
// to end. If something outside still holds the filesystem (a container's
// mount namespace that has not gone yet), the kernel keeps the connection
// and the loops never end by themselves: after abortGrace the connection
// is aborted through fusectl, which ends them.
func (m *Mount) unmountKernel(ctx context.Context) error {
	if at := m.opt.At; at != nil {
		defer at.Close()
		return unmountServer(ctx, m.server, func(int) error { return at.unmount() }, m.mountDir, m.dev)
	}
	return unmountServer(ctx, m.server, serverUnmount(m.server, m.mountDir), m.mountDir, m.dev)
}

// serverUnmount unmounts server's file system at dir by its path: go-fuse's
// own unmount (which retries while busy), or with flags a detach.
func serverUnmount(server *fuse.Server, dir string) func(flags int) error {
	return func(flags int) error {
		if flags == 0 {
			return server.Unmount()
		}
		return unix.Unmount(dir, flags)
	}
}

// unmountServer unmounts server's file system at dir (device dev) through
// unmount (flags 0, or unix.MNT_DETACH) as unmountKernel describes. When
// unmount finds the mount gone (ErrMountGone) it waits for the server all
// the same, and returns that error.
func unmountServer(ctx context.Context, server *fuse.Server, unmount func(flags int) error, dir string, dev uint64) error {
	done := make(chan error, 1)
	go func() {
		var err error
		for i := 0; ; i++ {
			if err = unmount(0); err == nil || errors.Is(err, ErrMountGone) {
				break
			}
			if i == 2 {
				// Busy: detach it now; the kernel lets go once the last user does.
				err = unmount(unix.MNT_DETACH)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err == nil || errors.Is(err, ErrMountGone) {
			// Unmounted or detached (by this call or another): done once
			// the kernel ends the connection (go-fuse waits for that only
			// after an unmount).
			server.Wait()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(abortGrace):
	case <-ctx.Done():
	}
	still := fmt.Errorf("fusefs: %s was still in use after the unmount: connection aborted", dir)
	aerr := abortConnection(dev)
	select {
	case err := <-done:
		return errors.Join(still, aerr, err)
	case <-ctx.Done():
		return errors.Join(aerr, fmt.Errorf("fusefs: %s: the kernel did not end the connection: %w", dir, ctx.Err()))
	}
}

// abortConnection aborts the FUSE connection of device dev, mounting the
// fusectl filesystem first if needed.
func abortConnection(dev uint64) error {
	const ctl = "/sys/fs/fuse/connections"
	path := fmt.Sprintf("%s/%d/abort", ctl, unix.Minor(dev))
	if _, err := os.Stat(path); err != nil {
		unix.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	return os.WriteFile(path, []byte("1"), 0o200)
}

// AbortUnder aborts the connections of the FUSE file systems mounted at
// dir or beneath it, whoever serves them: every request waiting on one
// fails (ENOTCONN), and the kernel lets go of its server. It returns the
// mount points it aborted.
//
// It is for a server that cannot finish dying. A process killed
// (SIGKILL) while one of its threads waited on a FUSE request to a file
// system the process serves itself never exits: the kernel waits for the
// answer no thread is left to give, and the process keeps its descriptors
// (a data directory's lock among them) until the connection is aborted.
func AbortUnder(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	mounts, err := mountinfo.MountsUnder(abs)
	if err != nil {
		return nil, err
	}
	var aborted []string
	var errs []error
	for _, m := range mounts {
		if !strings.HasPrefix(m.FSType, "fuse") || m.Dev == 0 {
			continue
		}
		if err := abortConnection(m.Dev); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("fusefs: abort %s: %w", m.Point, err))
			continue
		}
		aborted = append(aborted, m.Point)
	}
	return aborted, errors.Join(errs...)
}

// raiseReadahead lets the kernel read ahead 1 MiB at a time (FUSE offers
// 128 KiB) on the mount of device dev, so sequential reads cost a quarter
// of the requests. Best effort.
func raiseReadahead(dev uint64) {
	if dev == 0 {
		return
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
	os.WriteFile(p, []byte("1024"), 0o644)
}

// newIno returns an inode number reserved in the store for a new node.
func (m *Mount) newIno() (uint64, error) {
	if m.inoNext == m.inoEnd {
		const block = 4096
		first, err := m.st.ReserveInos(m.ctx, block)
		if err != nil {
			return 0, err
		}
		m.inoNext, m.inoEnd = first, first+block
	}
	m.inoNext++
	return m.inoNext - 1, nil
}

// maxDelay bounds how long changes wait while writes never pause long
// enough for the quiet period; maxLog bounds the namespace ops they hold.
const (
	maxDelayPeriods = 15
	maxLog          = 100_000
)

// kick restarts the quiet-period timer after a change; m.mu is held.
func (m *Mount) kick() {
	if m.quiet < 0 || m.closed {
		return
	}
	now := time.Now()
	if m.dirtySince.IsZero() {
		m.dirtySince = now
	}
	d := min(m.quiet, m.dirtySince.Add(maxDelayPeriods*m.quiet).Sub(now))
	if len(m.log) >= maxLog {
		d = 0
	}
	if m.timer == nil {
		m.timer = time.AfterFunc(max(d, 0), m.onQuiet)
		return
	}
	m.timer.Reset(max(d, 0))
}

func (m *Mount) onQuiet() {
	// The timer's goroutine is the mount's too: Unmount waits for it (it
	// sets closed before it waits, so no Add comes after the Wait).
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.bg.Add(1)
	m.mu.Unlock()
	defer m.bg.Done()
	_, _, err := m.Commit(m.ctx)
	m.mu.Lock()
	m.lastErr = err
	m.mu.Unlock()
}

// sync makes everything written so far durable as a revision (fsync).
func (m *Mount) sync() error {
	m.syncMu.Lock()
	rev, changed, notes, err := m.flush(m.ctx)
	m.syncMu.Unlock()
	if changed && m.opt.OnCommit != nil {
		m.opt.OnCommit(rev)
	}
	if len(notes) > 0 {
		// Called for a kernel request (FSYNC), which may hold a lock the
		// invalidations need: send them once it has been answered.
		m.bg.Add(1)
		go func() {
			defer m.bg.Done()
			m.notify(notes)
		}()
	}
	var ce *ConflictError
	if errors.As(err, &ce) {
		return nil // the data is safe in the conflict copy
	}
	return err
}

// Commit commits everything written so far as one revision of the
// workspace (none if nothing changed). When the workspace changed the same
// paths meanwhile it fails with a *ConflictError, which also unwraps to
// *fsstore.ConflictError.
func (m *Mount) Commit(ctx context.Context) (core.Revision, bool, error) {
	m.syncMu.Lock()
	rev, changed, notes, err := m.flush(ctx)
	m.syncMu.Unlock()
	m.notify(notes)
	if err != nil {
		return rev, false, err
	}
	if changed && m.opt.OnCommit != nil {
		m.opt.OnCommit(rev)
	}
	return rev, changed, err
}

// notice is a kernel cache invalidation, sent once m.mu is released.
type notice struct {
	parent uint64 // entry: parent node id and name
	name   string
	child  uint64 // entry deleted: its node id (0: plain entry invalidation)
	ino    uint64 // inode: node id
	data   bool   // inode: drop cached pages too
}

// flush commits the pending changes to the target workspace as one
// revision, and returns the kernel invalidations that others' changes
// committed meanwhile call for. The caller holds syncMu, and sends the
// notices once it has let go of it (see notify).
func (m *Mount) flush(ctx context.Context) (core.Revision, bool, []notice, error) {
	pre, up := m.preUpload(ctx)
	defer func() {
		if up != nil {
			// Its chunks stay safe from GC until the commit below is done.
			up.Close()
		}
	}()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return core.Revision{}, false, nil, ErrUnmounted
	}
	if len(m.log) == 0 && len(m.touched) == 0 {
		m.mu.Unlock()
		return core.Revision{}, false, nil, nil
	}
	if up == nil {
		up = m.st.NewUploader()
	}
	ops, err := m.pendingOps(ctx, up, pre)
	if err != nil {
		m.mu.Unlock()
		return core.Revision{}, false, nil, err
	}
	if len(ops) == 0 || m.trivial() {
		m.settle(nil)
		m.mu.Unlock()
		return core.Revision{}, false, nil, nil
	}
	info := m.opt.Info
	info.Base = m.base
	rev, err := m.st.CommitNodes(ctx, m.target, ops, info)
	var notes []notice
	if err != nil {
		var pe *core.PathError
		if !errors.As(err, new(*core.ConflictError)) && !errors.As(err, &pe) {
			m.mu.Unlock()
			return rev, false, nil, err
		}
		// Keep the mount's version whole in a workspace of its own and
		// carry on there.
		rev, err = m.keepConflict(ctx, ops, err)
		m.mu.Unlock()
		return rev, false, nil, err
	}
	if rev.Rev != m.base+1 {
		// Others committed in between: the kernel must forget what they changed.
		if notes, err = m.pull(ctx, m.base, rev.Rev-1, rev.Rev); err != nil {
			m.mu.Unlock()
			return rev, true, nil, err
		}
	}
	snap, err := m.st.Snapshot(ctx, m.target, rev.Rev)
	if err != nil {
		m.mu.Unlock()
		return rev, true, notes, err
	}
	m.base = rev.Rev
	m.settle(snap)
	m.refreshQuota(ctx)
	m.mu.Unlock()
	return rev, true, notes, nil
}

// refreshQuota asks Options.Remaining again (keeping the last answer if
// it fails). m.mu is held, or the mount is not serving yet.
func (m *Mount) refreshQuota(ctx context.Context) {
	if m.opt.Remaining == nil {
		return
	}
	if left, err := m.opt.Remaining(ctx); err == nil {
		m.left = left
	}
}

// checkQuota fails with core.ErrQuota when n more bytes of uncommitted
// writes would take the tenant past what it may still store. m.mu is held.
func (m *Mount) checkQuota(n int64) error {
	if m.opt.Remaining == nil {
		return nil
	}
	// At most what was written, and at most the chunks it dirtied.
	pending := min(m.written, int64(m.spool.inUse-m.cacheSlots)*m.chunk)
	if pending+n > m.left {
		return fmt.Errorf("fusefs: %d bytes not yet committed, %d more, over the %d the tenant's quota leaves: %w", pending, n, max(m.left, 0), core.ErrQuota)
	}
	return nil
}

// record appends a namespace op to the log, with the inodes it concerns.
func (m *Mount) record(op fsstore.NodeOp, a, b uint64) {
	m.log = append(m.log, op)
	m.logInos = append(m.logInos, [2]uint64{a, b})
}

// trivial reports whether the pending changes come to nothing but
// directory times: every op concerns only inodes made since the last
// flush and gone again (temporary files), and nothing else changed.
func (m *Mount) trivial() bool {
	gone := func(ino uint64) bool {
		n := m.nodes[ino]
		return ino == 0 || n != nil && n.created && n.nlink == 0
	}
	for _, p := range m.logInos {
		if !gone(p[0]) || !gone(p[1]) {
			return false
		}
	}
	for ino, n := range m.touched {
		if !gone(ino) && !(n.isDir() && !n.created && !n.dirtyMode && !n.dirtyOwner) {
			return false
		}
	}
	return true
}

// chunkLen is how many bytes of n's chunk idx lie within its size (0 or
// less: none).
func (m *Mount) chunkLen(n *node, idx int64) int64 { return min(m.chunk, n.size-idx*m.chunk) }

// preUploaded is a dirty chunk preUpload stored: its slot's generation
// and length when it was read, and its content.
type preUploaded struct {
	gen     uint64
	n       int64
	content *core.Content
}

// preUpload stores the dirty chunks of the changed files without the
// mount's lock, so that writers, readers and lookups go on
// while a commit moves the bulk of its data (a commit of 256 MiB of new
// writes, or of a tree copied in, held the lock for 0.3-2 s). The chunks
// are found with the lock held, read and stored without it, and
// pendingOps uses one only if its slot has not changed since (the slot's
// generation); a chunk written meanwhile is read again under the lock.
// It returns what it stored, by slot (a chunk it could not read is left
// to pendingOps), and the Uploader that holds their leases, nil if there
// was nothing to store.
func (m *Mount) preUpload(ctx context.Context) (map[int64]preUploaded, *fsstore.Uploader) {
	type job struct {
		slot int64
		gen  uint64
		n    int64
	}
	var jobs []job
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, nil
	}
	for _, n := range m.touched {
		if n.nlink == 0 || !n.isReg() {
			continue
		}
		for idx, slot := range n.chunks {
			if k := m.chunkLen(n, idx); k > 0 {
				jobs = append(jobs, job{slot, m.spool.gen(slot), k})
			}
		}
	}
	m.mu.Unlock()
	if len(jobs) == 0 {
		return nil, nil
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].slot < jobs[j].slot })
	up := m.st.NewUploader()
	pre := make(map[int64]preUploaded, len(jobs))
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		if c, err := up.Put(ctx, newSlotReader(m.spool, j.slot, j.n)); err == nil {
			pre[j.slot] = preUploaded{j.gen, j.n, c}
		}
	}
	if up.Flush(ctx) != nil {
		return nil, up // pendingOps stores them all again
	}
	return pre, up
}

// pendingOps turns the mount's changes into NodeOps: the namespace log,
// then contents and attributes of every changed inode still linked. The
// contents go through up (which holds the new chunks' leases: close it
// once the commit of the ops is done), taken from pre where a chunk's
// slot is unchanged since preUpload read it. m.mu is held.
func (m *Mount) pendingOps(ctx context.Context, up *fsstore.Uploader, pre map[int64]preUploaded) ([]fsstore.NodeOp, error) {
	ops := append([]fsstore.NodeOp(nil), m.log...)
	inos := make([]uint64, 0, len(m.touched))
	for ino := range m.touched {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		n := m.touched[ino]
		if n.nlink == 0 {
			continue
		}
		if n.isReg() && (n.cut || n.resized || len(n.chunks) > 0 || n.created && n.size > 0) {
			if n.cut {
				ops = append(ops, fsstore.NodeOp{Kind: core.OpTruncate, Ino: ino, Size: n.srcLimit})
			}
			if len(n.chunks) > 0 {
				idxs := make([]int64, 0, len(n.chunks))
				for idx := range n.chunks {
					idxs = append(idxs, idx)
				}
				sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
				content := &core.Content{}
				var holes []int64
				for _, idx := range idxs {
					k := m.chunkLen(n, idx)
					if k <= 0 {
						continue
					}
					slot := n.chunks[idx]
					p, ok := pre[slot]
					c := p.content
					if !ok || p.gen != m.spool.gen(slot) || p.n != k {
						var err error
						if c, err = up.Put(ctx, newSlotReader(m.spool, slot, k)); err != nil {
							return nil, err
						}
					}
					if len(c.Chunks) == 0 {
						holes = append(holes, idx) // all zeros
						continue
					}
					ref := c.Chunks[0]
					ref.Index = idx
					content.Chunks = append(content.Chunks, ref)
				}
				if len(content.Chunks) > 0 || len(holes) > 0 {
					ops = append(ops, fsstore.NodeOp{Kind: core.OpWrite, Ino: ino, Content: content, Holes: holes})
				}
			}
			ops = append(ops, fsstore.NodeOp{Kind: core.OpTruncate, Ino: ino, Size: n.size})
		}
		if n.dirtyMode {
			ops = append(ops, fsstore.NodeOp{Kind: core.OpChmod, Ino: ino, Mode: permMode(n.mode)})
		}
		if n.dirtyOwner {
			ops = append(ops, fsstore.NodeOp{Kind: core.OpChown, Ino: ino, UID: n.uid, GID: n.gid})
		}
		// Every change moved the inode's ctime: the store keeps the time
		// the mount showed, not the commit's (tools that compare ctimes,
		// git's index, would otherwise see every committed file change).
		ops = append(ops, fsstore.NodeOp{Kind: core.OpUtimes, Ino: ino, Mtime: n.mtime, Ctime: n.ctime})
	}
	if err := up.Flush(ctx); err != nil {
		return nil, err
	}
	return ops, nil
}

// settle makes the committed state the new base: pending changes are
// dropped, nodes nobody references are forgotten. snap is the new
// snapshot (nil: unchanged). m.mu is held.
func (m *Mount) settle(snap *fsstore.Snapshot) {
	if snap != nil {
		m.snap = snap
	}
	for ino, n := range m.touched {
		if n.nlink == 0 {
			// Unlinked while open: stays as it is for open descriptors.
			m.release(n)
			continue
		}
		m.keepCached(n)
		n.created, n.dirtyMode, n.dirtyOwner, n.cut, n.resized = false, false, false, false, false
		// A changed directory keeps its entries: they are what was just
		// committed, and listing it again (find or ls right after cp -r)
		// then reads no database. Others' changes reload it (pull).
		n.src, n.file = nil, nil
		n.srcLimit = n.size
		delete(m.touched, ino)
	}
	clear(m.touched)
	m.log, m.logInos = m.log[:0], m.logInos[:0]
	m.dirtySince = time.Time{}
	m.written = 0
	for ino, n := range m.nodes {
		if n.nlink > 0 {
			n.file = nil // read from the new snapshot
			if n.src != nil && n.lookups == 0 {
				n.src = nil
			}
		}
		if n.lookups == 0 && ino != m.rootIno {
			m.dropData(n)
			delete(m.nodes, ino)
		}
	}
}

// keepConflict commits ops to a fork of the workspace at the mount's base,
// named after the workspace, and retargets the mount at it. m.mu is held.
func (m *Mount) keepConflict(ctx context.Context, ops []fsstore.NodeOp, cause error) (core.Revision, error) {
	name := fsstore.CopyName(m.ws.Name, "conflict", time.Now().UTC().Format("20060102T150405.000000000"))
	fork, err := m.st.Fork(ctx, m.target, m.base, name)
	if err != nil {
		return core.Revision{}, fmt.Errorf("keep conflicting changes: %w (after %w)", err, cause)
	}
	info := m.opt.Info
	info.Message = "changes that conflicted with " + m.ws.Name
	rev, err := m.st.CommitNodes(ctx, fork.ID, ops, info)
	if err != nil {
		m.st.DeleteWorkspace(context.WithoutCancel(ctx), fork.ID)
		return rev, fmt.Errorf("keep conflicting changes: %w (after %w)", err, cause)
	}
	snap, err := m.st.Snapshot(ctx, fork.ID, rev.Rev)
	if err != nil {
		return rev, err
	}
	m.target, m.base = fork.ID, rev.Rev
	m.settle(snap)
	return rev, &ConflictError{ID: fork.ID, Name: name, Err: cause}
}

// Refresh brings a host mount up to the workspace head: it commits what
// is pending, then tells the kernel to forget every entry and inode that
// others changed since, so its long-lived caches stay right.
func (m *Mount) Refresh(ctx context.Context) error {
	m.syncMu.Lock()
	rev, changed, notes, err := m.flush(ctx)
	if err == nil {
		var more []notice
		more, err = m.pullHead(ctx)
		notes = append(notes, more...)
	}
	m.syncMu.Unlock()
	m.notify(notes)
	if changed && m.opt.OnCommit != nil {
		m.opt.OnCommit(rev)
	}
	return err
}

// pullHead moves a mount with nothing pending to the workspace head. The
// caller holds syncMu.
func (m *Mount) pullHead(ctx context.Context) ([]notice, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.target != m.ws.ID || len(m.log) > 0 || len(m.touched) > 0 {
		// A conflict copy has no other writers; changes made since the
		// flush pull the head in when they commit.
		return nil, nil
	}
	w, err := m.st.WorkspaceByID(ctx, m.target)
	if err != nil || w.Head == m.base {
		return nil, err
	}
	notes, err := m.pull(ctx, m.base, w.Head, w.Head)
	if err != nil {
		return nil, err
	}
	snap, err := m.st.Snapshot(ctx, m.target, w.Head)
	if err != nil {
		return nil, err
	}
	m.base = w.Head
	m.settle(snap)
	return notes, nil
}

// pull reloads the nodes that revisions (from, to] of the target changed,
// as they are at revision now (to, or the mount's own commit right after
// it), and returns the kernel invalidations they need. m.mu is held, and
// the mount's pending changes are in revision now.
func (m *Mount) pull(ctx context.Context, from, to, now int64) ([]notice, error) {
	cs, err := m.st.Diff(ctx, m.target, from, to)
	if err != nil {
		return nil, err
	}
	old, err := m.st.Snapshot(ctx, m.target, from)
	if err != nil {
		return nil, err
	}
	cur, err := m.st.Snapshot(ctx, m.target, to)
	if err != nil {
		return nil, err
	}
	final := cur
	if now != to {
		if final, err = m.st.Snapshot(ctx, m.target, now); err != nil {
			return nil, err
		}
	}
	var notes []notice
	inos := map[uint64]bool{}
	entry := func(sn *fsstore.Snapshot, p string, gone bool) {
		dir, name := filepath.Split(p)
		dst, err := sn.Stat(ctx, strings.TrimSuffix(dir, "/"))
		if err != nil {
			return
		}
		inos[dst.Ino] = true
		n := notice{parent: m.nodeID(dst.Ino), name: name}
		if gone {
			if st, err := sn.Stat(ctx, p); err == nil {
				n.child = m.nodeID(st.Ino)
				inos[st.Ino] = true
			}
		}
		notes = append(notes, n)
	}
	for _, op := range cs.Ops {
		switch op.Kind {
		case core.OpDelete, core.OpDeleteAll:
			entry(old, op.Path, true)
		case core.OpRename:
			entry(old, op.From, true)
			entry(cur, op.Path, false)
		case core.OpMkdir, core.OpCreate, core.OpSymlink, core.OpMknod, core.OpLink:
			entry(cur, op.Path, false)
			if st, err := old.Stat(ctx, op.Path); err == nil {
				inos[st.Ino] = true // replaced
			}
		}
		switch op.Kind {
		case core.OpCreate, core.OpWrite, core.OpTruncate, core.OpChmod, core.OpChown, core.OpUtimes, core.OpLink:
			p := op.Path
			if op.Kind == core.OpLink {
				p = op.From
			}
			if st, err := cur.Stat(ctx, p); err == nil {
				inos[st.Ino] = true
			}
		}
	}
	for ino := range inos {
		notes = append(notes, notice{ino: m.nodeID(ino), data: true})
		n := m.nodes[ino]
		if n == nil {
			continue
		}
		st, err := final.StatIno(ctx, ino)
		if err != nil {
			// Gone: open descriptors keep what it held.
			n.nlink = 0
			if n.src == nil {
				n.src = old
			}
			continue
		}
		m.dropData(n)
		n.setStat(st)
	}
	return notes, nil
}

// notify sends kernel cache invalidations; m.mu must not be held, since
// the kernel may call back (to write back pages) before answering.
func (m *Mount) notify(notes []notice) {
	if m.server == nil {
		return
	}
	for _, n := range notes {
		switch {
		case n.ino != 0 && n.data:
			m.server.InodeNotify(n.ino, 0, 0)
		case n.ino != 0:
			m.server.InodeNotify(n.ino, -1, 0)
		case n.child != 0:
			m.server.DeleteNotify(n.parent, n.child, n.name)
		default:
			m.server.EntryNotify(n.parent, n.name)
		}
	}
}

// Unmount commits what is pending (see Commit) and unmounts. The mount is
// gone even when the commit fails; the error then says where the changes
// were kept.
func (m *Mount) Unmount(ctx context.Context) error {
	// Have the kernel write back pages dirtied through mmap first.
	if fd, err := m.openRoot(); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
	_, _, cerr := m.Commit(ctx)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrUnmounted
	}
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
	}
	m.mu.Unlock()
	uerr := m.unmountKernel(ctx)
	// This goroutine, like unmountKernel's, ends with the FUSE connection,
	// which unmountKernel has ended or aborted; when ctx ends first it is
	// left to finish once the kernel lets go, and closes the spool then.
	done := make(chan struct{})
	go func() {
		m.server.Wait()
		m.bg.Wait()
		m.cancel()
		m.mu.Lock()
		m.spool.close()
		m.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		uerr = errors.Join(uerr, fmt.Errorf("fusefs: %s detached, still in use: %w", m.mountDir, ctx.Err()))
	}
	return errors.Join(cerr, uerr)
}

// openRoot opens the root of the mount.
func (m *Mount) openRoot() (int, error) {
	if at := m.opt.At; at != nil {
		return at.openRoot()
	}
	return unix.Open(m.mountDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// Dir is the directory the mount serves.
func (m *Mount) Dir() string { return m.mountDir }

// Status reports which workspace the mount commits to now (the workspace
// itself, or the conflict copy after a conflict), the revision of it the
// mount is based on, and the error of the last background commit.
func (m *Mount) Status() (target, base int64, lastErr error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.target, m.base, m.lastErr
}

// CleanupStale unmounts a FUSE file system left at dir by a process that
// died (lazily, as fusermount -u -z would). A dir with nothing mounted is
// not an error.
func CleanupStale(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		mounted, err := isFuseMount(abs)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(abs, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("fusefs: unmount stale %s: %w", abs, err)
		}
	}
}

// isFuseMount reports whether a FUSE file system is mounted at dir.
func isFuseMount(dir string) (bool, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.Point == dir && strings.HasPrefix(m.FSType, "fuse") {
			return true, nil
		}
	}
	return false, nil
}

// closeOnExecFuse marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse opens them without it, and a child started later (the sandbox
// helper, a container's init) would otherwise hold every mount's
// connection: the kernel would keep it after the unmount, for as long as
// the child lives.
func closeOnExecFuse() {
	for _, fd := range procfd.Inheritable() {
		if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && target == "/dev/fuse" {
			unix.CloseOnExec(fd)
		}
	}
}

// storeTail puts the last page of a file made and written through the
// mount into the kernel's page cache (FUSE_NOTIFY_STORE) when the
// descriptor that made it (file handle fh) is closed, if that page is
// partial.
//
// Written through FUSE without the writeback cache, the kernel keeps the
// pages a write covers whole, but not a partial one: it would READ the
// last page of every file written (cp, an unpacked tree, a build's
// outputs) the first time it is read, and on a read-write FUSE file
// system every READ also drops the inode's atime, so the next stat asks
// for the attributes again. Storing the page makes both passes of a later
// grep cost no request. Only the bytes the mount holds are stored, and
// they never reach past the size the kernel knows (the store would move
// it otherwise). A write or truncate handled while the store was on its
// way (it waits for the page's lock, which such a writer holds) makes it
// stale: the page is then invalidated again at once.
//
// The store replaces the page whatever the kernel holds in it, so it is
// made only while the kernel cannot hold that page whole (node.tailKept):
// a shared mapping can write into the page only once the kernel has it
// whole, which for a page written in part takes a READ, and a READ of the
// page cancels the store. What is left is a mapping's first fault on the
// page racing with the maker's close (docs/FUSE.md).
func (m *Mount) storeTail(nodeID, fh uint64) {
	m.mu.Lock()
	n := m.nodes[m.inoOf(nodeID)]
	if n == nil || n.creator != fh {
		m.mu.Unlock()
		return
	}
	n.creator = 0
	if !n.isReg() || n.nlink == 0 || m.server == nil || m.closed || n.size%m.page == 0 || n.tailKept {
		m.mu.Unlock()
		return
	}
	off := n.size - n.size%m.page
	_, dirty := n.chunks[off/m.chunk]
	_, cached := n.cached[off/m.chunk] // committed meanwhile (RELEASE comes late)
	if !dirty && !cached {
		m.mu.Unlock()
		return
	}
	buf := make([]byte, n.size-off)
	if err := m.readAt(n, buf, off); err != nil {
		m.mu.Unlock()
		return
	}
	gen := n.gen
	server := m.server
	m.mu.Unlock()
	if server.InodeNotifyStoreCache(nodeID, off, buf) != fuse.OK {
		return
	}
	m.mu.Lock()
	stale := n.gen != gen
	if !stale {
		n.tailKept = true
	}
	m.mu.Unlock()
	if stale {
		server.InodeNotify(nodeID, off, int64(len(buf)))
	}
}

// readTail notes a READ of [off, end) of n: if it reaches the partial
// last page, the kernel now holds that page whole. m.mu is held.
func (m *Mount) readTail(n *node, end int64) {
	if n.size%m.page != 0 && end > n.size-n.size%m.page {
		n.tailKept = true
	}
}
