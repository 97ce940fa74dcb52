package fusefs

import (
	"errors"
	"io"
	"io/fs"
	"sort"
	"syscall"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// node is the mount's view of one inode: every inode the kernel holds a
// reference to, and every inode changed since the last flush, has one.
// Inodes in neither set read straight from the snapshot.
type node struct {
	ino                 uint64
	mode                uint32 // S_IFMT bits and permissions
	uid, gid            uint32
	nlink               uint32
	size                int64
	mtime, ctime, atime int64 // Unix nanoseconds
	target              string
	rdev                uint64 // device nodes

	lookups uint64 // references the kernel holds (LOOKUP minus FORGET)
	gen     uint64 // moves on every change of the file's bytes or size (see storeTail)
	creator uint64 // the file handle of the descriptor that made the file, while open
	// tailKept: the kernel may hold the file's partial last page whole
	// (read through the mount, stored, or kept through a truncate or
	// others' change), so a shared mapping may have written into it:
	// storeTail leaves it alone. A write that moves the end of the file
	// into another page clears it (written in part, that page is not whole).
	tailKept bool

	// Changes not yet flushed (the node is in Mount.touched).
	created               bool            // made since the last flush: the log creates it
	dirtyMode, dirtyOwner bool            // the mode or owner changed (times go with every change)
	cut                   bool            // srcLimit fell below the committed size
	resized               bool            // truncated or extended since the last flush
	chunks                map[int64]int64 // dirty chunk index -> spool slot
	cached                map[int64]int64 // committed chunk index -> spool slot holding a copy

	// Regular files: clean bytes below srcLimit come from src (the mount's
	// snapshot when nil); bytes past it read as zeros unless dirty.
	src      *fsstore.Snapshot
	file     *fsstore.File
	srcLimit int64

	// Directories. children is every entry once the directory changed
	// (nil: as in the snapshot); it stays after a commit, which wrote
	// those entries. cookies give entries readdir offsets that stay put
	// while others come and go.
	children   map[string]dent
	cookies    map[string]uint64
	nextCookie uint64
	listing    []dent // cached, in cookie order; nil when stale

	// up and name: the entry a directory hangs from, as this mount last
	// reached it (Lookup, READDIRPLUS, Mkdir, Rename); pathLen walks them.
	up   uint64
	name string
}

// dent is a directory entry; mode holds only the S_IFMT bits.
type dent struct {
	name   string
	ino    uint64
	mode   uint32
	cookie uint64
}

func (n *node) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }
func (n *node) isReg() bool { return n.mode&syscall.S_IFMT == syscall.S_IFREG }

// unixMode converts a store mode to unix mode bits.
func unixMode(m fs.FileMode) uint32 { return fsstore.UnixMode(m) }

// permMode converts unix permission bits to a store mode.
func permMode(u uint32) fs.FileMode { return fsstore.ModeOf(u &^ syscall.S_IFMT) }

func nodeFromStat(st core.Stat) *node {
	n := &node{ino: st.Ino, mode: unixMode(st.Mode), uid: st.UID, gid: st.GID, nlink: st.Nlink, size: st.Size,
		mtime: st.Mtime.UnixNano(), ctime: st.Ctime.UnixNano(), target: st.Target, rdev: st.Rdev}
	n.atime = n.mtime
	n.srcLimit = n.size
	return n
}

// setStat reloads a clean node's metadata from the store.
func (n *node) setStat(st core.Stat) {
	n.mode, n.uid, n.gid, n.nlink, n.size = unixMode(st.Mode), st.UID, st.GID, st.Nlink, st.Size
	n.mtime, n.ctime, n.target, n.rdev = st.Mtime.UnixNano(), st.Ctime.UnixNano(), st.Target, st.Rdev
	n.srcLimit = n.size
	n.file, n.src = nil, nil
	n.children, n.listing = nil, nil
	n.gen++
	n.tailKept = true
}

func (m *Mount) now() int64 { return time.Now().UnixNano() }

// node returns the node for ino, loading it from the snapshot if needed.
func (m *Mount) node(ino uint64) (*node, error) {
	if n := m.nodes[ino]; n != nil {
		return n, nil
	}
	st, err := m.snap.StatIno(m.ctx, ino)
	if err != nil {
		return nil, err
	}
	n := nodeFromStat(st)
	m.nodes[ino] = n
	return n, nil
}

// dir returns the directory node for ino.
func (m *Mount) dir(ino uint64) (*node, error) {
	n, err := m.node(ino)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, syscall.ENOTDIR
	}
	return n, nil
}

// touch marks n as changed since the last flush.
func (m *Mount) touch(n *node) { m.touched[n.ino] = n }

// release drops n unless the kernel or a pending change still needs it.
func (m *Mount) release(n *node) {
	if n.lookups > 0 || n.ino == m.rootIno {
		return
	}
	if _, ok := m.touched[n.ino]; ok {
		return
	}
	m.dropData(n)
	delete(m.nodes, n.ino)
}

// dropData frees n's dirty chunks and cached copies.
func (m *Mount) dropData(n *node) {
	for _, slot := range n.chunks {
		m.spool.release(slot)
	}
	n.chunks = nil
	m.dropCached(n, 0)
}

// dropCached frees n's cached copies of committed chunks from index from on.
func (m *Mount) dropCached(n *node, from int64) {
	for idx, slot := range n.cached {
		if idx >= from {
			m.spool.release(slot)
			delete(n.cached, idx)
			m.cacheSlots--
		}
	}
}

// cacheRef names a cached chunk, in the order chunks were cached.
type cacheRef struct {
	ino       uint64
	idx, slot int64
}

// keepCached turns n's dirty chunks, just committed, into cached copies
// of its committed content, evicting the oldest copies over the budget.
func (m *Mount) keepCached(n *node) {
	for idx, slot := range n.chunks {
		if m.cacheMax == 0 || idx*m.chunk >= n.size {
			m.spool.release(slot)
			continue
		}
		if n.cached == nil {
			n.cached = map[int64]int64{}
		}
		n.cached[idx] = slot
		m.cacheSlots++
		m.cacheQ = append(m.cacheQ, cacheRef{n.ino, idx, slot})
	}
	n.chunks = nil
	for m.cacheSlots > m.cacheMax && len(m.cacheQ) > 0 {
		r := m.cacheQ[0]
		m.cacheQ = m.cacheQ[1:]
		if o := m.nodes[r.ino]; o != nil && o.cached[r.idx] == r.slot {
			m.spool.release(r.slot)
			delete(o.cached, r.idx)
			m.cacheSlots--
		}
	}
	if len(m.cacheQ) > 2*m.cacheSlots+1024 {
		// Drop references to copies already gone.
		q := m.cacheQ[:0]
		for _, r := range m.cacheQ {
			if o := m.nodes[r.ino]; o != nil && o.cached[r.idx] == r.slot {
				q = append(q, r)
			}
		}
		m.cacheQ = q
	}
}

// child looks name up in directory d.
func (m *Mount) child(d *node, name string) (dent, bool, error) {
	if d.children != nil {
		e, ok := d.children[name]
		return e, ok, nil
	}
	st, err := m.snap.Lookup(m.ctx, d.ino, name)
	if errors.Is(err, core.ErrNotFound) {
		return dent{}, false, nil
	} else if err != nil {
		return dent{}, false, err
	}
	if m.nodes[st.Ino] == nil {
		// Cached until the next flush sweeps unreferenced nodes.
		m.nodes[st.Ino] = nodeFromStat(st)
	}
	return dent{name: name, ino: st.Ino, mode: unixMode(st.Mode) & syscall.S_IFMT}, true, nil
}

// entries loads directory d's entries for changing them.
func (m *Mount) entries(d *node) (map[string]dent, error) {
	if d.children != nil {
		return d.children, nil
	}
	es, err := m.snap.ReadDirIno(m.ctx, d.ino)
	if err != nil {
		return nil, err
	}
	d.children = make(map[string]dent, len(es))
	for _, e := range es {
		d.children[e.Name] = dent{name: e.Name, ino: e.Ino, mode: unixMode(e.Type) & syscall.S_IFMT}
	}
	return d.children, nil
}

// changed records a change to directory d's entries.
func (m *Mount) changed(d *node, now int64, subdirs int) {
	d.nlink = uint32(int(d.nlink) + subdirs)
	d.mtime, d.ctime = now, now
	d.listing = nil
	m.touch(d)
}

// list returns directory d's entries in cookie order.
func (m *Mount) list(d *node) ([]dent, error) {
	if d.listing != nil {
		return d.listing, nil
	}
	var cur []dent
	if d.children != nil {
		cur = make([]dent, 0, len(d.children))
		for _, e := range d.children {
			cur = append(cur, e)
		}
		sort.Slice(cur, func(i, j int) bool { return cur[i].name < cur[j].name })
	} else {
		es, err := m.snap.ReadDirIno(m.ctx, d.ino)
		if err != nil {
			return nil, err
		}
		cur = make([]dent, len(es))
		for i, e := range es {
			cur[i] = dent{name: e.Name, ino: e.Ino, mode: unixMode(e.Type) & syscall.S_IFMT}
		}
	}
	// Names keep their cookie; new names get the next ones, in name order.
	if d.cookies == nil {
		d.cookies = make(map[string]uint64, len(cur))
		d.nextCookie = firstCookie
	}
	live := make(map[string]uint64, len(cur))
	for i := range cur {
		c, ok := d.cookies[cur[i].name]
		if !ok {
			c = d.nextCookie
			d.nextCookie++
		}
		cur[i].cookie = c
		live[cur[i].name] = c
	}
	d.cookies = live
	sort.Slice(cur, func(i, j int) bool { return cur[i].cookie < cur[j].cookie })
	d.listing = cur
	return cur, nil
}

// firstCookie follows the offsets of "." (1) and ".." (2).
const firstCookie = 3

// emptyDir reports whether directory d has no entries.
func (m *Mount) emptyDir(d *node) (bool, error) {
	if d.children != nil {
		return len(d.children) == 0, nil
	}
	es, err := m.snap.ReadDirIno(m.ctx, d.ino)
	return len(es) == 0, err
}

// readAt reads file data into p from offset off (p must not reach past
// the end of the file).
func (m *Mount) readAt(n *node, p []byte, off int64) error {
	cs := m.chunk
	for len(p) > 0 {
		idx := off / cs
		in := off - idx*cs
		k := min(int64(len(p)), cs-in)
		part := p[:k]
		if slot, ok := n.chunks[idx]; ok {
			if err := m.spool.readAt(slot, part, in); err != nil {
				return err
			}
		} else if err := m.readClean(n, part, off); err != nil {
			return err
		}
		p, off = p[k:], off+k
	}
	return nil
}

// readClean reads bytes that are not dirty: committed bytes below
// srcLimit, zeros past it.
func (m *Mount) readClean(n *node, p []byte, off int64) error {
	cs := m.chunk
	for len(p) > 0 {
		idx := off / cs
		in := off - idx*cs
		k := min(int64(len(p)), cs-in)
		part := p[:k]
		clean := max(0, min(k, n.srcLimit-off)) // bytes of part below srcLimit
		if slot, ok := n.cached[idx]; ok && clean > 0 {
			if err := m.spool.readAt(slot, part[:clean], in); err != nil {
				return err
			}
		} else if clean > 0 {
			data, err := m.cleanChunk(n, idx)
			if err != nil {
				return err
			}
			got := int64(copy(part[:clean], data[min(in, int64(len(data))):]))
			clear(part[got:clean])
		}
		clear(part[clean:])
		p, off = p[k:], off+k
	}
	return nil
}

// cachedChunk is one committed chunk, as read from a snapshot.
type cachedChunk struct {
	src  *fsstore.Snapshot
	ino  uint64
	idx  int64
	data []byte
}

// cleanChunk returns committed chunk idx of n (shorter than the chunk
// size at the end of the file). A few recent chunks are kept: the kernel
// reads in pieces smaller than a chunk, and a snapshot's chunks never change.
func (m *Mount) cleanChunk(n *node, idx int64) ([]byte, error) {
	src := n.src
	if src == nil {
		src = m.snap
	}
	for i := range m.chunks {
		if c := &m.chunks[i]; c.src == src && c.ino == n.ino && c.idx == idx {
			return c.data, nil
		}
	}
	if n.file == nil {
		f, err := src.OpenIno(m.ctx, n.ino)
		if err != nil {
			return nil, err
		}
		n.file = f
	}
	start := idx * m.chunk
	k := max(0, min(m.chunk, n.file.Size()-start))
	c := &m.chunks[m.nextChunk]
	m.nextChunk = (m.nextChunk + 1) % len(m.chunks)
	if int64(cap(c.data)) < k {
		c.data = make([]byte, m.chunk)
	}
	c.src, c.data = nil, c.data[:k]
	got, err := n.file.ReadAt(c.data, start)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	c.data = c.data[:got]
	c.src, c.ino, c.idx = src, n.ino, idx
	return c.data, nil
}

// dirty returns the spool slot of chunk idx, copying its clean bytes in
// unless the caller overwrites [from, to) of it and that covers them all.
func (m *Mount) dirty(n *node, idx, from, to int64) (int64, error) {
	if slot, ok := n.chunks[idx]; ok {
		return slot, nil
	}
	if n.chunks == nil {
		n.chunks = map[int64]int64{}
	}
	if slot, ok := n.cached[idx]; ok {
		// The cached copy becomes the dirty chunk: nothing to copy in.
		delete(n.cached, idx)
		m.cacheSlots--
		n.chunks[idx] = slot
		return slot, nil
	}
	cs := m.chunk
	slot := m.spool.alloc(from == 0 && to == cs)
	n.chunks[idx] = slot
	start := idx * cs
	cleanEnd := min(cs, max(0, n.srcLimit-start)) // clean bytes in this chunk
	if cleanEnd > 0 && (from > 0 || to < cleanEnd) {
		buf := make([]byte, cleanEnd)
		if err := m.readClean(n, buf, start); err != nil {
			return 0, err
		}
		if err := m.spool.writeAt(slot, buf, 0); err != nil {
			return 0, err
		}
	}
	return slot, nil
}

// write writes p at off.
func (m *Mount) write(n *node, p []byte, off int64) error {
	cs := m.chunk
	for len(p) > 0 {
		idx := off / cs
		in := off - idx*cs
		k := min(int64(len(p)), cs-in)
		slot, err := m.dirty(n, idx, in, in+k)
		if err != nil {
			return err
		}
		if err := m.spool.writeAt(slot, p[:k], in); err != nil {
			return err
		}
		p, off = p[k:], off+k
	}
	if off > n.size {
		if (off-1)/m.page != (n.size-1)/m.page || n.size == 0 {
			n.tailKept = false // a new last page
		}
		n.size = off
	}
	n.gen++
	now := m.now()
	n.mtime, n.ctime = now, now
	m.touch(n)
	return nil
}

// truncate sets a file's size.
func (m *Mount) truncate(n *node, size int64) error {
	cs := m.chunk
	if size < n.size {
		for idx, slot := range n.chunks {
			if idx*cs >= size {
				m.spool.release(slot)
				delete(n.chunks, idx)
			}
		}
		idx := size / cs
		if slot, ok := n.chunks[idx]; ok {
			m.spool.zero(slot, size-idx*cs, cs)
		}
		m.dropCached(n, idx)
		if size < n.srcLimit {
			n.srcLimit = size
			n.cut = true
		}
	}
	n.size = size
	n.resized = true
	n.gen++
	n.tailKept = true
	now := m.now()
	n.mtime, n.ctime = now, now
	m.touch(n)
	return nil
}

// hangs records that directory entry name of d is n, for pathLen.
func hangs(d *node, name string, n *node) {
	if n.isDir() {
		n.up, n.name = d.ino, name
	}
}

// pathLen is the length of directory d's workspace path ("" for the root),
// false if a directory on the way up is not in memory. The kernel pins the
// ancestors of every directory it refers to, so that is rare; then the
// store's own check at commit is what remains.
func (m *Mount) pathLen(d *node) (int, bool) {
	l := 0
	for steps := 0; d.ino != m.rootIno; steps++ {
		if d.up == 0 || steps > core.MaxPathLen {
			return 0, false
		}
		l += 1 + len(d.name)
		if d = m.nodes[d.up]; d == nil || !d.isDir() {
			return 0, false
		}
	}
	return max(l-1, 0), true
}

// joinLen is the length of a path of length dir joined with name.
func joinLen(dir int, name string) int {
	if dir == 0 {
		return len(name)
	}
	return dir + 1 + len(name)
}

// roomFor refuses an entry name in directory d whose path would be longer
// than the store takes, so nothing the mount accepts fails at commit.
func (m *Mount) roomFor(d *node, name string) error {
	if l, ok := m.pathLen(d); ok && joinLen(l, name) > core.MaxPathLen {
		return syscall.ENAMETOOLONG
	}
	return nil
}

// fitsUnder reports whether every path in the subtree of directory ino is
// at most room bytes longer than the directory's own path. It reads the
// subtree's entries (changed directories from memory, the rest from the
// snapshot) and stops at the first path too long.
func (m *Mount) fitsUnder(ino uint64, room int) (bool, error) {
	type dirAt struct {
		ino uint64
		rel int
	}
	stack := []dirAt{{ino, 0}}
	for len(stack) > 0 {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		var es []dent
		if n := m.nodes[top.ino]; n != nil && n.children != nil {
			for _, e := range n.children {
				es = append(es, e)
			}
		} else {
			got, err := m.snap.ReadDirIno(m.ctx, top.ino)
			if err != nil {
				return false, err
			}
			for _, e := range got {
				es = append(es, dent{name: e.Name, ino: e.Ino, mode: unixMode(e.Type) & syscall.S_IFMT})
			}
		}
		for _, e := range es {
			rel := top.rel + 1 + len(e.name)
			if rel > room {
				return false, nil
			}
			if e.mode == syscall.S_IFDIR {
				stack = append(stack, dirAt{e.ino, rel})
			}
		}
	}
	return true, nil
}
