package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"computerd/core"
	"computerd/fsstore"
)

// View serves committed revisions of a store's workspaces, read-only, at
// one directory that lives as long as the daemon: DIR/W-R is revision R
// of workspace W (both ids). Every exec's /workspace is an overlay whose
// lower layer is such a directory (see computerd/overlay), so the
// kernel's caches of the view outlive any one exec:
//
//   - A revision's tree is a set of FUSE nodes the kernel keeps (dentries,
//     attributes, listings, pages) for as long as it likes: revisions are
//     immutable, so nothing ever has to be invalidated. A second exec on
//     the same revision reads nothing through FUSE.
//   - A file or symlink is one node for every tree that holds the same
//     version of it (same store inode, same row: fsstore.Version), so its
//     cached pages carry over to every later revision in which it did not
//     change. A new revision costs one READDIRPLUS per directory walked;
//     the bytes of unchanged files are not read again.
//   - Directories are one node per tree. A directory node shared by two
//     trees would be one inode under two parents, which the kernel's
//     dcache cannot hold (it moves the dentry back and forth).
//   - Each workspace has one live tree (DIR/W-LG), which Acquire moves to
//     the revision an exec asks for whenever no exec is using it: it reads
//     the diff between the two revisions (O(changes)) and tells the kernel
//     to forget exactly the entries that changed, so every other dentry,
//     listing and page stays warm across revisions. An exec that starts
//     while another uses the live tree at another revision gets the
//     revision's own tree (DIR/W-R) instead.
//
// OPEN and OPENDIR answer ENOSYS, so opening costs no request, and the
// mount is read-only, so the kernel refuses writes itself.
type View struct {
	st     *fsstore.Store
	dir    string
	ttl    time.Duration
	server *fuse.Server
	dev    uint64
	ctx    context.Context
	cancel context.CancelFunc

	// arenas holds the buffers of the directories read ahead (prefetch):
	// one taken per directory, prefetchDirs in all.
	arenas chan []byte

	mu    sync.Mutex
	nodes map[uint64]*viewNode // by node id: every node the kernel holds
	files map[fileKey]*viewNode
	dirs  map[dirKey]*viewNode
	trees map[string]*viewTree // by root entry name
	live  map[int64]*liveTree  // by workspace
	next  uint64               // the next node id
}

// liveTree is a workspace's live tree and who uses it.
type liveTree struct {
	tree  *viewTree
	gen   int           // its root is named W-L<gen>; a reset makes a new one
	users int           // execs using it: it moves only at 0
	ready chan struct{} // closed once the kernel has been told of the last move
}

// ViewOptions configures OpenView.
type ViewOptions struct {
	Store *fsstore.Store
	// CacheTimeout is how long the kernel may keep entries and attributes
	// (default 24h; they never change, so longer only saves requests).
	CacheTimeout time.Duration
	Debug        bool // log every FUSE request, to Logger (default: the standard logger)
	Logger       *log.Logger
}

// viewTree is one revision served under the view's root.
type viewTree struct {
	name string // its root's entry under the view's root
	ws   int64
	snap *fsstore.Snapshot // of the revision it shows (a live tree's moves)
	live bool
	root *viewNode // while the kernel holds it
	read time.Time // of the last READ of a file reached through it
}

type fileKey struct {
	ino uint64
	v   fsstore.Version
}

type dirKey struct {
	tree *viewTree
	ino  uint64
}

// viewNode is a node the kernel holds.
type viewNode struct {
	*node // metadata (and nothing else of a Mount's node is used)
	id    uint64
	dir   bool
	fkey  fileKey
	// tree is a directory's own tree; a file's is the tree it was last
	// reached through. A file reads from snap: the tree's snapshot when it
	// was reached, or when its live tree moved and it did not change.
	tree    *viewTree
	snap    *fsstore.Snapshot
	lookups uint64
	list    []fsstore.Node // a directory's entries, once listed
	// parent is the directory a file was last reached through; a
	// directory's fetched says its files were read ahead (prefetch), a
	// file's that its contents were handed to the kernel.
	parent  *viewNode
	fetched bool
}

// OpenView mounts a View at dir, which must exist. Close unmounts it.
func OpenView(dir string, opt ViewOptions) (*View, error) {
	if opt.Store == nil {
		return nil, fmt.Errorf("fusefs: no store")
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &View{st: opt.Store, dir: dir, ttl: opt.CacheTimeout, ctx: ctx, cancel: cancel, next: fuse.FUSE_ROOT_ID + 1,
		arenas: make(chan []byte, prefetchDirs),
		nodes:  map[uint64]*viewNode{}, files: map[fileKey]*viewNode{}, dirs: map[dirKey]*viewNode{}, trees: map[string]*viewTree{}, live: map[int64]*liveTree{}}
	if v.ttl <= 0 {
		v.ttl = 24 * time.Hour
	}
	for range prefetchDirs {
		v.arenas <- make([]byte, 0, prefetchDirBytes)
	}
	server, err := fuse.NewServer(&viewFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), v: v}, dir, &fuse.MountOptions{
		FsName:            "computerd-view",
		Name:              "computerd",
		DirectMount:       true,
		DirectMountStrict: true,
		DirectMountFlags:  unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV,
		AllowOther:        true,
		Options:           []string{"default_permissions"},
		// An exec's overlay takes the view through a mount idmapped with
		// its container's ids (computerd/overlay), which FUSE allows only
		// to a server that says so.
		IDMappedMount: true,
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		DisableXAttrs: true,
		DisableSplice: true,
		// Nothing here ever changes: the kernel keeps pages across opens
		// and never compares attributes to drop them.
		ExplicitDataCacheControl: true,
		EnableSymlinkCaching:     true,
		Debug:                    opt.Debug,
		Logger:                   opt.Logger,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fusefs: mount view at %s: %w", dir, err)
	}
	v.server = server
	closeOnExecFuse()
	go server.Serve() // ends with the connection; Close waits for it
	if err := server.WaitMount(); err != nil {
		server.Unmount()
		cancel()
		return nil, fmt.Errorf("fusefs: mount view at %s: %w", dir, err)
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil {
		v.dev = st.Dev
	}
	raiseReadahead(v.dev)
	return v, nil
}

// Dir is the directory the view is mounted at.
func (v *View) Dir() string { return v.dir }

// Acquire returns the directory that shows revision rev of workspace ws,
// for an exec to use until it calls release. It is the workspace's live
// tree, moved to rev if no exec uses it, or else the revision's own tree.
func (v *View) Acquire(ctx context.Context, ws, rev int64) (dir string, release func(), err error) {
	snap, err := v.st.Snapshot(ctx, ws, rev)
	if err != nil {
		return "", nil, err
	}
	rev = snap.Rev // core.Head: the head's number
	for {
		v.mu.Lock()
		lt := v.live[ws]
		if lt != nil {
			select {
			case <-lt.ready:
			default:
				// Another Acquire is telling the kernel of a move: wait.
				ready := lt.ready
				v.mu.Unlock()
				select {
				case <-ready:
				case <-ctx.Done():
					return "", nil, ctx.Err()
				}
				continue
			}
		}
		var notes []viewNotice
		switch {
		case lt != nil && lt.tree.snap.Rev == rev:
		case lt != nil && lt.users > 0:
			v.mu.Unlock()
			return fmt.Sprintf("%s/%d-%d", v.dir, ws, rev), func() {}, nil
		case lt == nil:
			lt = &liveTree{ready: closedChan}
			v.live[ws] = lt
			v.resetLive(lt, snap)
		default:
			notes = v.move(ctx, lt, snap)
		}
		lt.users++
		if len(notes) > 0 {
			lt.ready = make(chan struct{})
		}
		t, ready := lt.tree, lt.ready
		v.mu.Unlock()
		if len(notes) > 0 {
			v.notify(notes)
			close(ready)
		}
		release = sync.OnceFunc(func() {
			v.mu.Lock()
			lt.users--
			v.mu.Unlock()
		})
		return v.dir + "/" + t.name, release, nil
	}
}

// Forget drops the trees of workspace ws, which was deleted: its live
// tree and those of its revisions go, and the kernel is told to forget
// their root entries, so nothing it cached of them is reached again. (Its
// id is never given to another workspace, so no name under the view's
// root leads to them either.) It does not block on execs using them.
func (v *View) Forget(ws int64) {
	v.mu.Lock()
	delete(v.live, ws)
	var notes []viewNotice
	for name, t := range v.trees {
		if t.ws != ws {
			continue
		}
		t.live = false
		delete(v.trees, name)
		notes = append(notes, viewNotice{parent: fuse.FUSE_ROOT_ID, name: name})
	}
	v.mu.Unlock()
	v.notify(notes)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// resetLive gives lt a new tree at snap (a new root name, so nothing of
// the old one's dentries is reused).
func (v *View) resetLive(lt *liveTree, snap *fsstore.Snapshot) {
	lt.gen++
	t := &viewTree{name: fmt.Sprintf("%d-L%d", snap.Workspace.ID, lt.gen), ws: snap.Workspace.ID, snap: snap, live: true}
	if lt.tree != nil {
		lt.tree.live = false
		delete(v.trees, lt.tree.name)
	}
	lt.tree = t
	v.trees[t.name] = t
}

// viewNotice is a kernel cache invalidation, sent without v.mu held (the
// kernel may answer it with FORGETs).
type viewNotice struct {
	parent uint64 // entry: parent node id and name
	name   string
	inode  uint64 // or inode (attributes and pages): node id
}

func (v *View) notify(notes []viewNotice) {
	for _, n := range notes {
		if n.inode != 0 {
			v.server.InodeNotify(n.inode, 0, 0)
		} else {
			v.server.EntryNotify(n.parent, n.name)
		}
	}
}

// moveLimit is the size of a diff beyond which a live tree starts afresh
// rather than moving.
const moveLimit = 20000

// move moves live tree lt to snap's revision and returns what the kernel
// must forget: the entry of every path the diff touches (the kernel looks
// it up again, finding a changed file's new version as a new node), and
// the listing and attributes of every directory whose entries or
// attributes changed. Unchanged files follow the tree to the new revision.
// A diff that renames a directory, or is too big to be worth it, makes a
// new tree instead. v.mu is held.
func (v *View) move(ctx context.Context, lt *liveTree, snap *fsstore.Snapshot) []viewNotice {
	t, old := lt.tree, lt.tree.snap
	oldRoot := t.name
	cs, err := v.st.Diff(ctx, t.ws, old.Rev, snap.Rev)
	reset := err != nil || len(cs.Ops) > moveLimit
	if !reset {
		for _, op := range cs.Ops {
			if op.Kind == core.OpRename {
				if st, err := snap.Stat(ctx, op.Path); err != nil || st.IsDir() {
					reset = true
					break
				}
			}
		}
	}
	if reset {
		v.resetLive(lt, snap)
		return []viewNotice{{parent: fuse.FUSE_ROOT_ID, name: oldRoot}}
	}
	var notes []viewNotice
	stale := map[*viewNode]bool{} // nodes of versions the move leaves behind
	// dirNode is the live tree's node of directory p as snapshot sn has it.
	dirNode := func(sn *fsstore.Snapshot, p string) *viewNode {
		st, err := sn.Stat(ctx, p)
		if err != nil || !st.IsDir() {
			return nil
		}
		return v.dirs[dirKey{t, st.Ino}]
	}
	touchDir := func(d *viewNode, st core.Stat) {
		d.list = nil
		d.node = nodeFromStat(st)
		notes = append(notes, viewNotice{inode: d.id})
	}
	seen := map[string]bool{}
	for _, op := range cs.Ops {
		paths := []string{op.Path}
		if op.From != "" {
			paths = append(paths, op.From)
		}
		for _, p := range paths {
			if seen[p] {
				continue
			}
			seen[p] = true
			if p == "" { // the root's own attributes
				if st, err := snap.Stat(ctx, ""); err == nil && t.root != nil {
					touchDir(t.root, st)
				}
				continue
			}
			if on, err := lookupPath(ctx, old, p); err == nil && !on.IsDir() {
				if vn := v.files[fileKey{on.Ino, on.Version}]; vn != nil && vn.tree == t {
					stale[vn] = true
				}
			}
			if d := dirNode(snap, p); d != nil {
				// A directory still there: its listing or attributes changed.
				if st, err := snap.Stat(ctx, p); err == nil {
					touchDir(d, st)
				}
			}
			dir, name := path.Split(p)
			dir = strings.TrimSuffix(dir, "/")
			for _, sn := range []*fsstore.Snapshot{old, snap} {
				if d := dirNode(sn, dir); d != nil {
					d.list = nil
					notes = append(notes, viewNotice{parent: d.id, name: name})
				}
			}
		}
	}
	t.snap = snap
	for _, vn := range v.files {
		if vn.tree != t {
			continue
		}
		if stale[vn] {
			vn.tree = nil // keeps reading its own version from its snapshot
		} else if vn.snap != snap {
			vn.snap, vn.file = snap, nil
		}
	}
	return notes
}

// lookupPath describes the entry at p with its version.
func lookupPath(ctx context.Context, sn *fsstore.Snapshot, p string) (fsstore.Node, error) {
	dir, name := path.Split(p)
	st, err := sn.Stat(ctx, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return fsstore.Node{}, err
	}
	return sn.LookupNode(ctx, st.Ino, name)
}

// Nodes reports how many nodes the kernel holds, and of them how many are
// directories: what the view costs in memory.
func (v *View) Nodes() (all, dirs int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.nodes), len(v.dirs)
}

// Close unmounts the view (lazily if an overlay still uses it).
func (v *View) Close(ctx context.Context) error {
	err := unmountServer(ctx, v.server, serverUnmount(v.server, v.dir), v.dir, v.dev)
	v.cancel()
	return err
}

// tree returns the tree of the root entry name: "W-R" (revision R of
// workspace W) or a live tree's "W-L<gen>".
func (v *View) tree(name string) (*viewTree, error) {
	if t := v.trees[name]; t != nil {
		return t, nil
	}
	ws, rev, ok := strings.Cut(name, "-")
	w, err1 := strconv.ParseInt(ws, 10, 64)
	r, err2 := strconv.ParseInt(rev, 10, 64)
	if !ok || err1 != nil || err2 != nil || w <= 0 || r <= 0 {
		return nil, core.ErrNotFound
	}
	snap, err := v.st.Snapshot(v.ctx, w, r)
	if err != nil {
		return nil, err
	}
	t := &viewTree{name: name, ws: w, snap: snap}
	v.trees[name] = t
	return t, nil
}

// nodeFor returns the node of an entry reached through tree t, made if the
// kernel holds none, and counts the kernel's new reference to it.
func (v *View) nodeFor(t *viewTree, n fsstore.Node) *viewNode {
	var vn *viewNode
	if n.IsDir() {
		k := dirKey{t, n.Ino}
		if vn = v.dirs[k]; vn == nil {
			vn = &viewNode{node: nodeFromStat(n.Stat), dir: true, tree: t}
			v.dirs[k] = vn
			v.add(vn)
		}
	} else {
		k := fileKey{n.Ino, n.Version}
		if vn = v.files[k]; vn == nil {
			vn = &viewNode{node: nodeFromStat(n.Stat), fkey: k, tree: t, snap: t.snap}
			v.files[k] = vn
			v.add(vn)
		} else if vn.tree != t || vn.snap != t.snap {
			vn.tree, vn.snap, vn.file = t, t.snap, nil
		}
	}
	vn.lookups++
	return vn
}

func (v *View) add(vn *viewNode) {
	vn.id = v.next
	v.next++
	v.nodes[vn.id] = vn
}

// forget drops the kernel's nlookup references to node id.
func (v *View) forget(id, nlookup uint64) {
	vn := v.nodes[id]
	if vn == nil {
		return
	}
	vn.lookups -= min(vn.lookups, nlookup)
	if vn.lookups > 0 {
		return
	}
	delete(v.nodes, id)
	if !vn.dir {
		delete(v.files, vn.fkey)
		return
	}
	delete(v.dirs, dirKey{vn.tree, vn.ino})
	if t := vn.tree; t.root == vn {
		t.root = nil
		if !t.live && v.trees[t.name] == t {
			delete(v.trees, t.name)
		}
	}
}

// listing returns a directory's entries, reading them once.
func (v *View) listing(d *viewNode) ([]fsstore.Node, error) {
	if d.list == nil {
		list, err := d.tree.snap.ReadDirNodes(v.ctx, d.ino)
		if err != nil {
			return nil, err
		}
		d.list = list
		if d.list == nil {
			d.list = []fsstore.Node{}
		}
	}
	return d.list, nil
}

// viewFS answers the kernel's requests for a View.
type viewFS struct {
	fuse.RawFileSystem
	v *View
}

var _ fuse.RawFileSystem = (*viewFS)(nil)

func (f *viewFS) String() string { return "computerd-view" }

// rootNode describes the view's root directory.
var rootNode = &node{ino: fuse.FUSE_ROOT_ID, mode: syscall.S_IFDIR | 0o755, nlink: 2}

func (f *viewFS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	v := f.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if h.NodeId == fuse.FUSE_ROOT_ID {
		// Revisions come and go (made, pruned): no negative entries here.
		t, err := v.tree(name)
		if err != nil {
			return errno(err)
		}
		st, err := t.snap.StatNode(v.ctx, t.snap.RootIno())
		if err != nil {
			return errno(err)
		}
		vn := v.nodeFor(t, st)
		t.root = vn
		v.fillEntry(vn, out)
		return fuse.OK
	}
	d := v.nodes[h.NodeId]
	if d == nil || !d.dir {
		return fuse.ENOTDIR
	}
	var n fsstore.Node
	var err error
	if d.list != nil {
		i := sort.Search(len(d.list), func(i int) bool { return d.list[i].Name >= name })
		if i < len(d.list) && d.list[i].Name == name {
			n = d.list[i]
		} else {
			err = core.ErrNotFound
		}
	} else {
		n, err = d.tree.snap.LookupNode(v.ctx, d.ino, name)
	}
	if errors.Is(err, core.ErrNotFound) {
		// A revision never changes: the kernel may remember the absence.
		out.NodeId = 0
		out.SetEntryTimeout(v.ttl)
		return fuse.OK
	}
	if err != nil {
		return errno(err)
	}
	vn := v.nodeFor(d.tree, n)
	vn.parent = d
	v.fillEntry(vn, out)
	return fuse.OK
}

func (v *View) fillEntry(vn *viewNode, out *fuse.EntryOut) {
	out.NodeId = vn.id
	out.Generation = 1
	out.SetEntryTimeout(v.ttl)
	out.SetAttrTimeout(v.ttl)
	fillAttr(vn.node, &out.Attr)
}

func (f *viewFS) Forget(nodeID, nlookup uint64) {
	f.v.mu.Lock()
	defer f.v.mu.Unlock()
	f.v.forget(nodeID, nlookup)
}

func (f *viewFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	v := f.v
	n := rootNode
	if in.NodeId != fuse.FUSE_ROOT_ID {
		v.mu.Lock()
		vn := v.nodes[in.NodeId]
		v.mu.Unlock()
		if vn == nil {
			return fuse.ENOENT
		}
		n = vn.node
	}
	out.SetTimeout(v.ttl)
	fillAttr(n, &out.Attr)
	return fuse.OK
}

func (f *viewFS) Readlink(_ <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	v := f.v
	v.mu.Lock()
	defer v.mu.Unlock()
	vn := v.nodes[h.NodeId]
	if vn == nil || vn.mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, fuse.EINVAL
	}
	return []byte(vn.target), fuse.OK
}

// Open and OpenDir answer ENOSYS: the kernel then opens without asking,
// keeps pages and listings across opens, and sends no RELEASE.
func (f *viewFS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (f *viewFS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (f *viewFS) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.ENOSYS }

func (f *viewFS) StatFs(_ <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	out.Bsize, out.Frsize = 4096, 4096
	out.Blocks = 1 << 32
	out.Files = 1 << 32
	out.NameLen = core.MaxNameLen
	return fuse.OK
}

func (f *viewFS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	v := f.v
	v.mu.Lock()
	vn := v.nodes[in.NodeId]
	if vn == nil || !vn.isReg() {
		v.mu.Unlock()
		return nil, fuse.Status(syscall.EISDIR)
	}
	off := int64(in.Offset)
	if off >= vn.size {
		v.mu.Unlock()
		return fuse.ReadResultData(nil), fuse.OK
	}
	file := vn.file
	if file == nil {
		var err error
		if file, err = vn.snap.OpenIno(v.ctx, vn.ino); err != nil {
			v.mu.Unlock()
			return nil, errno(err)
		}
		vn.file = file
	}
	k := min(int64(len(buf)), int64(in.Size), vn.size-off)
	vn.fetched = true
	if vn.tree != nil {
		vn.tree.read = time.Now()
	}
	if d := vn.parent; d != nil && !d.fetched {
		v.prefetch(d)
	}
	v.mu.Unlock()
	// Reads run without the lock, so read-ahead and other files overlap.
	got, err := file.ReadAt(buf[:k], off)
	if err != nil && !(errors.Is(err, io.EOF) && int64(got) == k) {
		return nil, errno(err)
	}
	return fuse.ReadResultData(buf[:k]), fuse.OK
}

func (f *viewFS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, false)
}

func (f *viewFS) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return f.readDir(in, out, true)
}

// readDir lists a directory: offsets are positions in its (fixed) listing,
// after "." (1) and ".." (2).
func (f *viewFS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	v := f.v
	v.mu.Lock()
	defer v.mu.Unlock()
	add := func(e fuse.DirEntry) *fuse.EntryOut {
		if plus {
			return out.AddDirLookupEntry(e)
		}
		if out.AddDirEntry(e) {
			return &fuse.EntryOut{}
		}
		return nil
	}
	off := in.Offset
	if off < 1 && add(fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Off: 1}) == nil {
		return fuse.OK
	}
	if off < 2 && add(fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Off: 2}) == nil {
		return fuse.OK
	}
	if in.NodeId == fuse.FUSE_ROOT_ID {
		return fuse.OK // the revisions are reached by name only
	}
	d := v.nodes[in.NodeId]
	if d == nil || !d.dir {
		return fuse.ENOTDIR
	}
	list, err := v.listing(d)
	if err != nil {
		return errno(err)
	}
	i := int(max(off, 2) - 2)
	for ; i < len(list); i++ {
		e := list[i]
		eo := add(fuse.DirEntry{Name: e.Name, Mode: unixMode(e.Mode) & syscall.S_IFMT, Ino: e.Ino, Off: uint64(i) + 3})
		if eo == nil {
			break
		}
		if plus {
			vn := v.nodeFor(d.tree, e)
			vn.parent = d
			v.fillEntry(vn, eo)
		}
	}
	if plus && i == len(list) && !d.fetched && time.Since(d.tree.read) < prefetchAfterRead {
		// The whole listing is out, with its files' node ids, and files
		// of this tree are being read: read these ahead.
		v.prefetch(d)
	}
	return fuse.OK
}

// Reading a directory's files ahead. A command that reads one file of a
// directory (grep -r, a compiler, tar) usually reads its siblings next,
// one READ round trip each when they are cold. So the first READ of a
// file in a directory starts reading the directory's other small files
// in one query (Snapshot.ReadDirFiles) and hands each one's contents to
// the kernel (FUSE_NOTIFY_STORE): the command then finds them cached;
// and while files of a tree are being read, a directory of it is read
// ahead as soon as it is listed (READDIRPLUS), before its first READ. A
// listing alone (find, ls -R) reads nothing ahead. A version's contents
// never change, so what is stored is always right.
const (
	// prefetchDirs: directories read ahead at once, one per connection
	// of the store's read-ahead pool (each holds one while it queries),
	// so that the disk reads of a cold store overlap.
	prefetchDirs     = fsstore.ReadAheadConns
	prefetchFileMax  = 256 << 10 // larger files are left to READ (and the kernel's read-ahead)
	prefetchDirBytes = 4 << 20   // contents stored per directory at most (held in an arena between the query and the stores)
	// prefetchAfterRead: a directory listed this soon after a READ in its
	// tree is read ahead as soon as it is listed.
	prefetchAfterRead = time.Second
)

// prefetch starts reading directory d's files ahead, unless as many
// directories are being read ahead already (a later READ tries again).
// Call it with v.mu held.
func (v *View) prefetch(d *viewNode) {
	var arena []byte
	select {
	case arena = <-v.arenas:
		arena = arena[:0]
	default:
		return
	}
	list, err := v.listing(d)
	if err != nil {
		v.arenas <- arena
		return
	}
	d.fetched = true
	// The files the kernel holds and has not read, by inode; the listing
	// and the tree's snapshot agree (a move that changes the directory
	// drops its listing).
	want := map[uint64]fileKey{}
	for _, e := range list {
		if !e.Mode.IsRegular() || e.Size == 0 || e.Size > prefetchFileMax {
			continue
		}
		k := fileKey{e.Ino, e.Version}
		if vn := v.files[k]; vn != nil && !vn.fetched && vn.lookups > 0 {
			want[e.Ino] = k
		}
	}
	if len(want) == 0 {
		v.arenas <- arena
		return
	}
	snap, dir := d.tree.snap, d.ino
	go func() {
		defer func() { v.arenas <- arena }()
		// The contents are gathered first and stored after the query: a
		// store may wait for a READ of the same page, whose handler may
		// wait for v.mu or a connection of the store's pool, so neither
		// may be held meanwhile.
		type content struct {
			k    fileKey
			data []byte
		}
		var got []content
		var size int64
		snap.ReadDirFiles(v.ctx, dir, func(_ string, st core.Stat, r io.Reader) error {
			k, ok := want[st.Ino]
			if !ok || r == nil {
				return nil
			}
			if size += st.Size; size > prefetchDirBytes {
				return errPrefetchDone
			}
			b := arena[len(arena) : len(arena)+int(st.Size)]
			if _, err := io.ReadFull(r, b); err != nil {
				return err
			}
			arena = arena[:len(arena)+int(st.Size)]
			got = append(got, content{k, b})
			return nil
		})
		for _, c := range got {
			v.mu.Lock()
			vn := v.files[c.k]
			if vn == nil || vn.fetched || vn.lookups == 0 {
				v.mu.Unlock()
				continue
			}
			vn.fetched = true
			id := vn.id
			v.mu.Unlock()
			v.server.InodeNotifyStoreCache(id, 0, c.data)
		}
	}()
}

// errPrefetchDone ends a directory's read-ahead at its byte budget.
var errPrefetchDone = errors.New("fusefs: read-ahead budget spent")
