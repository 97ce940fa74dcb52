package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"computerd/core"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// Warm containers. Most of a Run's time goes into making its container:
// namespaces, mounts, cgroup, the init's start-up, the seccomp handshake.
// A Manager with Warm > 0 makes that many containers ahead of need, each
// with the default root and limits and nothing yet at /workspace, and runs
// in each a stub that waits for a command (stub.go). A Run that fits takes
// one: it attaches the Spec's workspace at the container's /workspace
// from inside the container's mount namespace (mountWorkspace), sends the
// stub the command, and sees it through as any other. Each container
// still runs one command and is destroyed after it; a keeper goroutine
// has the next made as soon as it ends, or while it runs if it runs long. Nothing of a warm container lives in the host's
// mount namespace, so nothing outlives it there.

// warmPool is a Manager's containers made ahead of time.
type warmPool struct {
	limits core.Limits         // the containers' limits
	ready  chan *warmContainer // made and waiting for a command
	stop   chan struct{}       // closed by Close
	wg     sync.WaitGroup      // the keepers and warmLife goroutines

	mu      sync.Mutex
	lastErr error // why the last container could not be made
}

// warmContainer is a container whose stub waits for its command.
type warmContainer struct {
	*container
	ctl      *os.File      // the stub's command is written here
	status   *os.File      // the stub's status bytes are read here
	jobs     chan *warmJob // the Run that took it sends its job here
	gone     chan struct{} // closed if it is destroyed unused
	taken    chan struct{} // closed when its job has come
	finished chan struct{} // closed when its job is done
}

// warmJob is a Run handed to the goroutine of a warm container.
type warmJob struct {
	ctx   context.Context
	r     *run
	spec  Spec
	out   func(Event)
	res   Result
	err   error
	stale bool // the container had died: run the job elsewhere
	done  chan struct{}
	// setLimits: the Run's memory, pids or CPU limits are not the pool's;
	// its container's cgroup takes them before the command starts.
	setLimits bool
}

// warmPrefix begins the IDs of warm containers.
const warmPrefix = "warm-"

// warmRetry is how long a keeper waits before it tries again to make a
// container after a failure, at most.
const warmRetry = 10 * time.Second

// Warmup starts making the Manager's warm containers (and its helper, if
// it has one) without waiting for the first Run. Call it after Sweep.
func (m *Manager) Warmup() error {
	if m.Helper != "" {
		_, err := m.helper()
		return err
	}
	_, err := m.warmPool()
	return err
}

// WarmReady is how many warm containers wait for a Run now. (A Manager
// whose helper runs the containers reports 0.)
func (m *Manager) WarmReady() int {
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	if m.pool == nil {
		return 0
	}
	return len(m.pool.ready)
}

// WarmError reports why the last warm container could not be made, or
// nil. (A Manager whose helper runs the containers reports nil.)
func (m *Manager) WarmError() error {
	m.poolMu.Lock()
	p := m.pool
	m.poolMu.Unlock()
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// warmPool returns the Manager's pool, starting it on first use; nil if
// Warm is 0, the Manager is closed, or its helper keeps the pool.
func (m *Manager) warmPool() (*warmPool, error) {
	if m.Warm <= 0 || m.Helper != "" { // a helper keeps its own
		return nil, nil
	}
	m.poolMu.Lock()
	defer m.poolMu.Unlock()
	if m.pool != nil || m.poolClosed {
		return m.pool, nil
	}
	if m.StateDir == "" {
		return nil, fmt.Errorf("%w: Manager.StateDir not set", ErrInvalidSpec)
	}
	if _, err := m.prepareRoot(); err != nil {
		return nil, err
	}
	p := &warmPool{
		limits: core.Limits{}.Or(m.Limits).Or(DefaultLimits),
		ready:  make(chan *warmContainer, m.Warm),
		stop:   make(chan struct{}),
	}
	for range m.Warm {
		p.wg.Add(1)
		go m.keepWarm(p)
	}
	m.pool = p
	return p, nil
}

// closePool stops the keepers; the unused containers are destroyed. It
// waits for that, and for Runs on warm containers to end.
func (m *Manager) closePool() {
	m.poolMu.Lock()
	p := m.pool
	m.pool, m.poolClosed = nil, true
	m.poolMu.Unlock()
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
}

// refillDelay is how long a keeper lets the command of a container just
// taken run before it makes the next: a short command is over by then, so
// that making the next does not slow it down; a long one does not leave
// its place in the pool empty for its whole run.
const refillDelay = 50 * time.Millisecond

// keepWarm keeps one place of the pool filled until the pool stops: it has
// a container made (each by a goroutine of its own, warmLife), offers it,
// and once a Run has taken it, starts over when that Run ends or after
// refillDelay, whichever comes first.
func (m *Manager) keepWarm(p *warmPool) {
	defer p.wg.Done()
	var retry time.Duration
	for {
		if retry > 0 {
			select {
			case <-p.stop:
				return
			case <-time.After(retry):
			}
		}
		select {
		case <-p.stop:
			return
		default:
		}
		made := make(chan warmMade, 1)
		p.wg.Add(1)
		go m.warmLife(p, made)
		r := <-made
		p.mu.Lock()
		p.lastErr = r.err
		p.mu.Unlock()
		if r.err != nil {
			retry = min(max(2*retry, 100*time.Millisecond), warmRetry)
			continue
		}
		retry = 0
		p.ready <- r.w // never blocks: one place per keeper
		select {
		case <-r.w.taken:
		case <-p.stop:
			return // warmLife destroys it
		}
		select {
		case <-r.w.finished:
		case <-time.After(refillDelay):
		case <-p.stop:
			return
		}
	}
}

// warmMade is what warmLife made.
type warmMade struct {
	w   *warmContainer
	err error
}

// warmLife makes one warm container and sees it through: it runs the job
// of the Run that takes it, or destroys it unused when the pool stops. It
// stays on its thread for life: a container's init dies with the thread
// that made it.
func (m *Manager) warmLife(p *warmPool, made chan<- warmMade) {
	defer p.wg.Done()
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	w, err := m.newWarm(p.limits)
	made <- warmMade{w, err}
	if err != nil {
		return
	}
	select {
	case job := <-w.jobs:
		close(w.taken)
		m.runJob(w, job)
		close(w.finished)
	case <-p.stop:
		close(w.gone)
		m.discard(w)
	}
}

// newWarm makes a container with the default root and the given limits
// whose stub waits for its command.
func (m *Manager) newWarm(limits core.Limits) (*warmContainer, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := warmPrefix + hex.EncodeToString(b[:])
	root, err := m.prepareRoot()
	if err != nil {
		return nil, err
	}
	cfg, err := m.config(id, root, true, limits) // /workspace comes with the Run
	if err != nil {
		return nil, err
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	first := 3 // the stub's descriptors follow the seccomp handshake's
	if !m.NoSeccomp {
		first++
	}
	proc := &libcontainer.Process{
		Args: []string{"/proc/self/exe", stubArg, strconv.Itoa(first), strconv.Itoa(first + 1)},
		Env:  DefaultEnv, Cwd: "/", Init: true,
	}
	k, err := m.startContainer(id, cfg, proc, true, ctlR, statusW)
	ctlR.Close()
	statusW.Close()
	if err != nil {
		ctlW.Close()
		statusR.Close()
		return nil, err
	}
	w := &warmContainer{container: k, ctl: ctlW, status: statusR, jobs: make(chan *warmJob),
		gone: make(chan struct{}), taken: make(chan struct{}), finished: make(chan struct{})}
	_ = statusR.SetReadDeadline(time.Now().Add(killGrace))
	var ready [1]byte
	if _, err := io.ReadFull(statusR, ready[:]); err != nil || ready[0] != stubReady {
		m.discard(w)
		return nil, fmt.Errorf("%w: %s: the stub did not start (%v)", ErrStart, id, err)
	}
	return w, nil
}

// discard kills and destroys a warm container that will run nothing.
func (m *Manager) discard(w *warmContainer) {
	w.ctl.Close()
	w.status.Close()
	_ = m.abort(w.container, errors.New("discarded"))
}

// runWarm runs a prepared Run in a warm container if one is ready and the
// Run fits the pool's containers (the default root and /tmp size; other
// limits are set on the container's cgroup); ok is false if it must make
// its own.
func (m *Manager) runWarm(ctx context.Context, r *run, spec Spec, out func(Event)) (res Result, ok bool, err error) {
	p, perr := m.warmPool()
	if perr != nil || p == nil || spec.Rootfs != "" || r.limits.Tmp != p.limits.Tmp {
		return Result{}, false, nil
	}
	if _, isFile := spec.Stdin.(*os.File); isFile {
		return Result{}, false, nil
	}
	for {
		var w *warmContainer
		select {
		case w = <-p.ready:
		default:
			return Result{}, false, nil
		}
		job := &warmJob{ctx: ctx, r: r, spec: spec, out: out, done: make(chan struct{}), setLimits: r.limits != p.limits}
		select {
		case w.jobs <- job:
		case <-w.gone:
			continue
		}
		<-job.done
		if job.stale {
			continue
		}
		return job.res, true, job.err
	}
}

// runJob runs a job in the warm container w, on the thread that made it.
func (m *Manager) runJob(w *warmContainer, job *warmJob) {
	defer close(job.done)
	defer func() { job.res.ID, job.res.Warm = w.id, true }()
	defer w.status.Close()
	defer w.ctl.Close()
	select {
	case wr := <-w.waitDone: // the stub died while it waited
		w.waitDone <- wr // back, for discard's wait
		job.stale = true
		m.discard(w)
		return
	default:
	}
	if job.setLimits {
		cfg := w.c.Config()
		cg := *cfg.Cgroups // the container's own is shared with its config
		cg.Resources = job.r.config.Cgroups.Resources
		cfg.Cgroups = &cg
		if err := w.c.Set(cfg); err != nil {
			// Such as a memory limit below what the stub uses: a new
			// container gets the limits from the start.
			job.stale = true
			m.discard(w)
			return
		}
	}
	if err := m.mountWorkspace(w.p, job.spec, job.r.limits.Tmp); err != nil {
		err = m.abort(w.container, fmt.Errorf("mount the workspace: %w", err))
		if errors.Is(err, unix.ESRCH) {
			job.stale = true // the stub died while it waited
		} else {
			job.err = err
		}
		return
	}

	cmd, _ := json.Marshal(stubCommand{Argv: job.spec.Argv, Env: job.r.env, Cwd: job.r.cwd, Stdin: job.spec.Stdin != nil})
	start := time.Now()
	_, err := w.ctl.Write(cmd)
	w.ctl.Close()
	if err != nil {
		job.stale = true
		_ = m.abort(w.container, err)
		return
	}
	_ = w.status.SetReadDeadline(time.Now().Add(killGrace))
	status, err := io.ReadAll(w.status)
	switch {
	case err != nil:
		job.err = m.abort(w.container, fmt.Errorf("no answer from the container's stub: %w", err))
		return
	case len(status) == 0:
		// The stub died before it reached the command: nothing ran.
		job.stale = true
		_ = m.abort(w.container, errors.New("the stub died"))
		return
	case string(status) != string(rune(stubExec)):
		// "E" and why; or "X", "E" and why the exec failed.
		msg := strings.TrimPrefix(strings.TrimPrefix(string(status), string(rune(stubExec))), string(rune(stubFail)))
		job.err = m.abort(w.container, errors.New(msg))
		return
	}
	if job.spec.Stdin == nil {
		w.stdinW.Close()
		w.stdinW = nil
	}
	job.res, job.err = m.finish(job.ctx, w.container, job.spec.Stdin, m.timeout(job.spec), start, job.out)
}

// mountWorkspace mounts spec's workspace directory (idmapped as a
// container made for the Run would have it, see workspaceMount), or if
// there is none a new tmpfs of tmpSize bytes, at /workspace in the mount
// namespace of the container whose init is p, nosuid and nodev.
func (m *Manager) mountWorkspace(p *libcontainer.Process, spec Spec, tmpSize int64) error {
	ids := m.ids()
	tree := -1
	if dir := spec.WorkspaceDir; dir != "" {
		// A detached copy of dir's mount, made here in the host's
		// namespace and attached in the container's.
		fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", dir, err)
		}
		defer unix.Close(fd)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if !spec.WorkspaceMapped {
			ns, err := ids.Userns()
			if err != nil {
				return err
			}
			attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
			attr.Userns_fd = uint64(ns.Fd())
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			return fmt.Errorf("mount_setattr: %w", err)
		}
		tree = fd
	}
	pid, err := p.Pid()
	if err != nil {
		return err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pidfd)
	done := make(chan error, 1)
	go func() {
		// This thread joins the container's mount namespace: it stays
		// locked, so that the runtime ends it with this goroutine and it
		// never runs anything else. (Init keeps the main goroutine on the
		// main thread, which the runtime could not end.)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare(CLONE_FS): %w", err)
			return
		}
		if err := unix.Setns(pidfd, unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("join the container's mount namespace: %w", err)
			return
		}
		if tree >= 0 {
			done <- unix.MoveMount(tree, "", unix.AT_FDCWD, "/workspace", unix.MOVE_MOUNT_F_EMPTY_PATH)
			return
		}
		// Mounted from the host's user namespace: owned by the
		// container's root only if told so.
		tmpfs := workspaceTmpfs(tmpSize, fmt.Sprintf(",uid=%d,gid=%d", ids.Base, ids.Base))
		done <- unix.Mount(tmpfs.Source, tmpfs.Destination, tmpfs.Device, uintptr(tmpfs.Flags), tmpfs.Data)
	}()
	return <-done
}
