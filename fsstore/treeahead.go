package fsstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Reading a tree ahead of its consumer. ReadTree of a single-layer
// workspace is bound by SQLite's work per row (b-tree descents, assembling
// each chunk from its overflow pages, the driver's copy), one core's worth.
// So while the caller's function consumes one directory, the queries of
// the directories that come next in ReadTree's order run on other cores:
//
//   - a dispatcher walks the tree in that order (preorder, subdirectories in
//     name order) with cheap listings of subdirectories only, and hands
//     each directory out as a job, at most aheadWindow beyond the one being
//     consumed;
//   - aheadWorkers workers take the jobs in that order and run each one's
//     listData query, passing its rows on in batches (of up to aheadBatch
//     bytes: a hand-over between goroutines per row cost more than the
//     row) through a channel of aheadBatches;
//   - the caller's goroutine consumes the jobs in the same order, exactly as
//     it would consume the query's rows itself.
//
// Memory stays bounded: at most aheadWindow+1 jobs of aheadBatches+2
// batches each (the worker's, the consumer's and those between them). Workers use connections of their own (Store.adb), and
// only one ReadTree at a time reads ahead (the others read as before), so
// a worker blocked on a slow consumer never holds a connection that the
// job its consumer waits for needs: that job was taken before, by the other
// worker, which has its own connection.
const (
	aheadWorkers = ReadAheadConns
	aheadWindow  = 6
	aheadBatches = 2
	aheadBatch   = 512 << 10 // bytes of chunk data
	aheadBatchN  = 64        // rows
)

// ReadAheadConns is the size of the store's read-ahead connection pool,
// whose page caches are small (contents read once): ReadTree's workers
// and ReadDirFiles query on it.
const ReadAheadConns = 2

// aheadJob is one directory's listing with data.
type aheadJob struct {
	path string
	ino  uint64
	rows chan []plusRow // closed after the last batch, err set before
	err  error          // what ended the rows early
	stop chan struct{}  // closed when the consumer abandons the job
	cur  []plusRow      // the consumer's batch
}

// next is the job's rowSource.
func (j *aheadJob) next() (plusRow, bool, error) {
	for len(j.cur) == 0 {
		b, ok := <-j.rows
		if !ok {
			return plusRow{}, false, j.err
		}
		j.cur = b
	}
	r := j.cur[0]
	j.cur[0] = plusRow{}
	j.cur = j.cur[1:]
	return r, true, nil
}

// treeAhead is one ReadTree reading ahead.
type treeAhead struct {
	v     *view    // the caller's: its statements list subdirectories
	q     *queries // the workers' statements, on Store.adb
	done  chan struct{}
	order chan *aheadJob // dispatcher -> consumer, in order
	work  chan *aheadJob // dispatcher -> workers, in order
	wg    sync.WaitGroup

	mu      sync.Mutex
	skipped map[string]bool // directories the consumer skipped (SkipDir)
	err     error           // the dispatcher's, set before order closes
}

// readTreeAhead is readTree for a single-layer view, reading ahead; ok is
// false if another ReadTree is reading ahead already (the caller then reads
// as usual).
func (v *view) readTreeAhead(s *Store, p string, dir uint64, fn TreeFunc) (bool, error) {
	select {
	case s.ahead <- struct{}{}:
	default:
		return false, nil
	}
	defer func() { <-s.ahead }()
	t := &treeAhead{
		v: v, q: s.aq, done: make(chan struct{}),
		order: make(chan *aheadJob, aheadWindow), work: make(chan *aheadJob, aheadWindow),
		skipped: map[string]bool{},
	}
	t.wg.Add(1 + aheadWorkers)
	go t.dispatch(p, dir)
	for range aheadWorkers {
		go t.worker()
	}
	err := t.consume(p, fn)
	close(t.done) // stops the dispatcher and the workers wherever they are
	t.wg.Wait()
	return true, err
}

func (t *treeAhead) dispatch(p string, dir uint64) {
	defer t.wg.Done()
	defer close(t.work)
	defer close(t.order)
	if err := t.dispatchDir(p, dir); err != nil {
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
	}
}

// dispatchDir hands out the job of directory p, then those of its
// subdirectories' trees, in order.
func (t *treeAhead) dispatchDir(p string, dir uint64) error {
	job := &aheadJob{path: p, ino: dir, rows: make(chan []plusRow, aheadBatches), stop: make(chan struct{})}
	for _, ch := range []chan *aheadJob{t.order, t.work} {
		select {
		case ch <- job:
		case <-t.done:
			return nil
		}
	}
	l := t.v.layers[0]
	rows, err := t.v.q.listDirs.QueryContext(t.v.ctx, l.ws, dir, l.rev)
	if err != nil {
		return wrapDB("read tree", err)
	}
	var subdirs []plusRow
	for rows.Next() {
		r, err := scanPlus(rows, false)
		if err != nil {
			rows.Close()
			return wrapDB("read tree", err)
		}
		subdirs = append(subdirs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return wrapDB("read tree", err)
	}
	for _, d := range subdirs {
		cp := joinPath(p, d.name)
		if t.isSkipped(cp) {
			continue
		}
		if err := t.dispatchDir(cp, d.in.ino); err != nil {
			return err
		}
	}
	return nil
}

func (t *treeAhead) worker() {
	defer t.wg.Done()
	for job := range t.work {
		job.err = t.fetch(job)
		close(job.rows)
	}
}

// fetch runs a job's query and passes its rows on. database/sql promises
// RawBytes only until the next row, but the driver (modernc.org/sqlite)
// hands out each blob in a slice of its own, made for that row, so the
// rows keep their chunk bytes without a copy (TestDriverBlobsAreFresh
// holds the driver to it).
func (t *treeAhead) fetch(job *aheadJob) error {
	select {
	case <-job.stop:
		return nil
	case <-t.done:
		return errAheadStopped
	default:
	}
	l := t.v.layers[0]
	rows, err := t.q.listData.QueryContext(t.v.ctx, l.ws, job.ino, l.rev)
	if err != nil {
		return err
	}
	defer rows.Close()
	var batch []plusRow
	var size int
	// send passes the batch on; false if the job is to end here (the
	// consumer abandoned it, or the whole read is over: then an error).
	send := func() (bool, error) {
		select {
		case job.rows <- batch:
			batch, size = nil, 0
			return true, nil
		case <-job.stop:
			return false, nil
		case <-t.done:
			return false, errAheadStopped
		}
	}
	for rows.Next() {
		r, err := scanPlus(rows, true)
		if err != nil {
			return err
		}
		batch = append(batch, r)
		size += len(r.data)
		if size >= aheadBatch || len(batch) >= aheadBatchN {
			if ok, err := send(); !ok {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		_, err := send()
		return err
	}
	return nil
}

// errAheadStopped ends a worker's job when the read it served is over.
var errAheadStopped = errors.New("read tree: stopped")

// consume visits directory p (whose own entry fn has seen) from its job,
// then its subdirectories, as readTree does from queries of its own.
func (t *treeAhead) consume(p string, fn TreeFunc) error {
	job, err := t.next()
	if err != nil {
		return err
	}
	if job.path != p {
		close(job.stop)
		return fmt.Errorf("read tree: listing of %q came instead of %q", job.path, p)
	}
	subdirs, err := t.v.readDirRows(p, job.next, fn)
	if err != nil {
		return err
	}
	return t.v.visitSubdirs(p, subdirs, fn, t.skip, func(cp string, _ *inode) error { return t.consume(cp, fn) })
}

// next returns the next job in order, dropping those of skipped trees.
func (t *treeAhead) next() (*aheadJob, error) {
	for {
		job, ok := <-t.order
		if !ok {
			t.mu.Lock()
			err := t.err
			t.mu.Unlock()
			if err == nil {
				err = errors.New("read tree: listing ended early")
			}
			return nil, err
		}
		if !t.isSkipped(job.path) {
			return job, nil
		}
		close(job.stop)
	}
}

func (t *treeAhead) skip(p string) {
	t.mu.Lock()
	t.skipped[p] = true
	t.mu.Unlock()
}

// isSkipped reports whether p or one of its ancestors was skipped.
func (t *treeAhead) isSkipped(p string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.skipped) == 0 {
		return false
	}
	for {
		if t.skipped[p] {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}
