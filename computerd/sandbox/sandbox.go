// Package sandbox runs one command in a fresh container and streams its
// output: one libcontainer (runc) container per command, embedded in the
// calling binary, which re-executes itself as the container's init.
//
// Every binary that runs containers must call Init first thing in main (and
// test binaries in TestMain): the re-executed init never reaches the rest of
// main. A Manager whose Helper is set runs its containers in a helper
// process instead (the small computerd-sandbox binary, whose main is
// HelperMain), so that their init is not the caller's larger image.
//
// A container gets a user namespace whose root is an unprivileged host id
// (Manager.IDs), a read-only root (read-only binds of the host's system
// directories and an /etc of its own, or a root directory of the
// caller's choosing), a tmpfs /tmp, the caller's directory read-write at
// /workspace (idmapped, so that it keeps the host's ids), private PID,
// mount, IPC, UTS, cgroup and network namespaces (loopback only: no
// network), Docker's default capabilities less NET_RAW and MKNOD,
// no_new_privs, a seccomp allow list, masked /proc paths, and cgroup
// memory, pids and CPU limits. docs/SANDBOX.md describes the profile and
// the figures measured.
//
// A Manager with Warm set makes containers ahead of need (warm.go): a Run
// takes one, has its workspace attached and its command executed in it,
// and so skips the making of its container; each still runs one command.
//
// A timeout, a cancelled context or the end of the command kills every
// process in the container (SIGKILL to its PID namespace's init, then to
// whatever its cgroup still holds) and destroys it, and Run always returns.
// Containers left by a process that died (kill -9) are removed by Sweep,
// which a supervisor calls at start-up.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"computerd/computerd/idmap"
	"computerd/core"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// Errors returned by this package, classified with errors.Is.
var (
	// ErrInvalidSpec means the Spec was rejected before anything started.
	ErrInvalidSpec = errors.New("sandbox: invalid spec")
	// ErrStart means the container or its command could not be started
	// (for example, the command was not found in the container).
	ErrStart = errors.New("sandbox: cannot start container")
	// ErrNotFound means the command is not in the container (Argv[0] on
	// none of its PATH's directories, or no such file); such an error is
	// ErrStart too, and reads "NAME: command not found in the sandbox".
	ErrNotFound = errors.New("sandbox: command not found")
	// ErrNotReaped means the container's processes were killed but did not
	// die within the kill grace period (stuck in the kernel); Run returned
	// anyway and the container is destroyed once they die.
	ErrNotReaped = errors.New("sandbox: container processes not reaped after kill")
)

// Stream names carried by Event.Stream.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// DefaultLimits apply where neither the Spec nor the Manager sets a limit.
var DefaultLimits = core.Limits{Memory: 1 << 30, Pids: 512, CPUs: 1, Tmp: 1 << 30}

// Spec describes one command to run.
type Spec struct {
	// ID names the container; it must be unique among the Manager's running
	// containers and consist of letters, digits and "_+-.". Empty means a
	// random ID.
	ID string
	// Argv is the command; Argv[0] is looked up in the container's PATH.
	Argv []string
	// Env is added to the container's environment, which does not inherit
	// the host's: it starts as DefaultEnv, and a variable here replaces a
	// default of the same name.
	Env []string
	// Cwd is the working directory, relative to /workspace (an absolute path
	// must lie under /workspace). Empty means /workspace.
	Cwd string
	// Stdin feeds the command's standard input; nil means /dev/null. Run
	// does not wait for a Read on it that never returns.
	Stdin io.Reader
	// WorkspaceDir is the host directory bind-mounted read-write at
	// /workspace, through a mount idmapped with the Manager's IDs: a file
	// the host has as owned by id i shows inside as owned by i, and what
	// the container's root creates is owned by 0 on the host. Empty means
	// an empty tmpfs there.
	WorkspaceDir string
	// WorkspaceMapped says WorkspaceDir shows the container's ids already
	// (host id IDs.Base+i for the container's i: an overlay over layers
	// idmapped so, as computerd/overlay mounts one, for overlayfs itself
	// cannot be idmapped): it is bound as it is.
	WorkspaceMapped bool
	// Rootfs is a host directory used as the read-only root. Empty means the
	// Manager's default root: read-only binds of the host's system
	// directories (Manager.HostDirs) over an empty directory.
	Rootfs string
	// Limits overrides the Manager's limits field by field.
	Limits core.Limits
	// Timeout kills the command when it runs longer. Zero means the
	// Manager's Timeout; if that is zero too, only ctx bounds the run.
	Timeout time.Duration
}

// Event is a piece of the command's output, delivered as it is produced:
// whole lines where possible, and a partial line once no more output has
// arrived for FlushDelay or the buffer holds FlushSize bytes.
type Event struct {
	Seq    uint64 // 1, 2, 3, ... across both streams, in delivery order
	Stream string // Stdout or Stderr
	Data   []byte // owned by the receiver
}

// Result is how a command ended.
type Result struct {
	ID       string
	ExitCode int            // exit status; -1 if killed by a signal
	Signal   syscall.Signal // the signal that killed the command, or 0
	Duration time.Duration  // from container start to the command's death
	TimedOut bool           // killed because Timeout elapsed
	Canceled bool           // killed because ctx was done
	OOMKills int            // processes the kernel OOM-killed in the container
	Warm     bool           // the command ran in a container made ahead of time
	Stdout   int64          // bytes written to stdout
	Stderr   int64          // bytes written to stderr
}

// Output delivery tuning.
const (
	// FlushDelay is how long a partial line waits for its newline.
	FlushDelay = 20 * time.Millisecond
	// FlushSize is the most output held back waiting for a newline.
	FlushSize = 32 << 10
)

// killGrace bounds how long Run waits for killed processes to die and for
// output pipes to drain.
const killGrace = 10 * time.Second

// DefaultEnv is the environment every command starts with.
var DefaultEnv = []string{
	"PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/tmp",
	"LANG=C.UTF-8",
	"TERM=dumb",
}

// DefaultHostDirs are the host directories bound read-only into the
// default root. Symbolic links among them (merged /usr) are recreated as
// links; missing ones are skipped. /etc is not among them: the default
// root has an /etc of its own (etc.go).
var DefaultHostDirs = []string{"/usr", "/bin", "/lib", "/lib64", "/sbin"}

// Manager runs containers whose state lives under StateDir. Its zero
// fields take defaults; it is safe for concurrent use once its fields are
// set.
type Manager struct {
	// StateDir holds libcontainer's state (StateDir/containers). One
	// Manager per StateDir. (The default root lives under RootsDir.)
	StateDir string
	// Limits are the defaults for Spec.Limits (zero fields: DefaultLimits).
	Limits core.Limits
	// Timeout is the default Spec.Timeout.
	Timeout time.Duration
	// HostDirs replaces DefaultHostDirs when not nil.
	HostDirs []string
	// IDs are the host ids a container's user namespace maps (zero:
	// idmap.Default): its root is host id IDs.Base.
	IDs idmap.Range
	// NoSeccomp turns the seccomp filter off (for measuring its cost).
	NoSeccomp bool
	// Helper is the path of the helper binary (computerd-sandbox) that runs
	// the containers; empty runs them in this process. See HelperMain.
	Helper string
	// Warm is how many containers the Manager keeps made ahead of need, for
	// Runs with the default root and /tmp size (see Run): 0 makes every
	// container when its Run comes. Set it before the first Run; the
	// containers are made from then on (or from Warmup) until Close.
	Warm int

	prepMu sync.Mutex
	root   string // the default root, once made

	helperMu   sync.Mutex
	helperConn *helperClient

	poolMu     sync.Mutex
	pool       *warmPool
	poolClosed bool
}

// MappedIDs are the host ids its containers' user namespaces map: IDs,
// or the default.
func (m *Manager) MappedIDs() idmap.Range { return m.ids() }

func (m *Manager) containersDir() string { return filepath.Join(m.StateDir, "containers") }

// Run runs spec.Argv in a fresh container and returns when it has ended and
// the container is gone. out, if not nil, receives the output as it is
// produced, from one goroutine at a time, in Seq order; it should not block
// for long (it holds back the command's output while it runs). A command
// that ran and failed is not an error: see Result. Run returns an error
// wrapping ErrInvalidSpec or ErrStart when the command did not run, and
// ErrNotReaped (with a Result) when killed processes would not die.
//
// With Warm set, a Run whose Spec keeps the default root and /tmp size
// and whose Stdin is not an *os.File takes a container made ahead of time
// (see Manager.Warm), setting its own memory, pids and CPU limits on it;
// the others, and all Runs while none is ready, create theirs on the spot.
func (m *Manager) Run(ctx context.Context, spec Spec, out func(Event)) (Result, error) {
	res, err := m.run(ctx, spec, out)
	return res, commandError(spec.Argv, err)
}

func (m *Manager) run(ctx context.Context, spec Spec, out func(Event)) (Result, error) {
	if out == nil {
		out = func(Event) {}
	}
	if m.Helper != "" {
		if res, ok, err := m.runHelper(ctx, spec, out); ok {
			return res, err
		}
	}
	r, err := m.prepare(spec)
	if err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{ID: r.id}, fmt.Errorf("%w: %w", ErrStart, context.Cause(ctx))
	}
	if res, ok, err := m.runWarm(ctx, r, spec, out); ok {
		return res, err
	}

	// The container's init gets SIGKILL when the thread that forked it
	// exits (see Init); keep this goroutine on one thread until the
	// container is gone, so that only the death of this process kills it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	p := &libcontainer.Process{Args: spec.Argv, Env: r.env, Cwd: r.cwd, Init: true}
	pipeStdin := false
	if f, ok := spec.Stdin.(*os.File); ok {
		p.Stdin = f
	} else {
		pipeStdin = spec.Stdin != nil
	}
	k, err := m.startContainer(r.id, r.config, p, pipeStdin)
	if err != nil {
		return Result{ID: r.id}, err
	}
	return m.finish(ctx, k, spec.Stdin, m.timeout(spec), time.Now(), out)
}

func (m *Manager) timeout(spec Spec) time.Duration {
	if spec.Timeout != 0 {
		return spec.Timeout
	}
	return m.Timeout
}

// container is a started container and the parent's ends of its
// process's pipes.
type container struct {
	id               string
	c                *libcontainer.Container
	p                *libcontainer.Process
	stdoutR, stderrR *os.File
	stdinW           *os.File // the command's stdin pipe, if it has one
	waitDone         chan waitResult
	destroyOnce      sync.Once
}

func (k *container) destroy() { k.destroyOnce.Do(func() { _ = k.c.Destroy() }) }

// closePipes closes the parent's ends of the process's pipes.
func (k *container) closePipes() {
	for _, f := range []*os.File{k.stdoutR, k.stderrR, k.stdinW} {
		if f != nil {
			f.Close()
		}
	}
}

// startContainer creates container id and starts p in it as its init, up
// to the exec of p.Args: the container is set up, the seccomp filter is in
// place and the command runs. It gives p pipes for stdout and stderr, and
// for stdin if pipeStdin (p.Stdin is left alone otherwise: nil is
// /dev/null), and passes extra as descriptors 3, 4, ... (after the
// seccomp handshake's socket). The caller's thread must stay locked until
// the container is destroyed. On error nothing is left behind (unless
// killed processes would not die: they are destroyed when they do).
func (m *Manager) startContainer(id string, cfg *configs.Config, p *libcontainer.Process, pipeStdin bool, extra ...*os.File) (*container, error) {
	c, err := libcontainer.Create(m.containersDir(), id, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: create %s: %w", ErrStart, id, err)
	}
	k := &container{id: id, c: c, p: p, waitDone: make(chan waitResult, 1)}
	var childEnds []*os.File // closed once the init has them
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	failEarly := func(err error) (*container, error) {
		k.closePipes()
		k.destroy()
		return nil, fmt.Errorf("%w: %s: %w", ErrStart, id, err)
	}
	var stdoutW, stderrW *os.File
	if k.stdoutR, stdoutW, err = os.Pipe(); err != nil {
		return failEarly(err)
	}
	childEnds = append(childEnds, stdoutW)
	if k.stderrR, stderrW, err = os.Pipe(); err != nil {
		return failEarly(err)
	}
	childEnds = append(childEnds, stderrW)
	p.Stdout, p.Stderr = stdoutW, stderrW
	if pipeStdin {
		var stdinR *os.File
		if stdinR, k.stdinW, err = os.Pipe(); err != nil {
			return failEarly(err)
		}
		childEnds = append(childEnds, stdinR)
		p.Stdin = stdinR
	}
	var sc *seccompConn
	if !m.NoSeccomp {
		if sc, err = newSeccompConn(); err != nil {
			return failEarly(err)
		}
		defer sc.Close()
		p.ExtraFiles = append(p.ExtraFiles, sc.child)
	}
	p.ExtraFiles = append(p.ExtraFiles, extra...)

	if err := c.Start(p); err != nil {
		return failEarly(err)
	}
	// From here on the init process exists: every exit path kills it.
	go func() {
		st, err := p.Wait()
		k.waitDone <- waitResult{st, err}
	}()
	if sc != nil {
		if err := sc.apply(); err != nil {
			return nil, m.abort(k, err)
		}
	}
	if err := c.Exec(); err != nil {
		return nil, m.abort(k, err)
	}
	return k, nil
}

// abort kills a started container whose command must not run, and
// returns err as a start error. The container is destroyed once its
// processes are dead.
func (m *Manager) abort(k *container, err error) error {
	m.kill(k.c, k.p)
	k.closePipes()
	select {
	case <-k.waitDone:
		k.destroy()
	case <-time.After(killGrace):
		go func() { <-k.waitDone; k.destroy() }()
	}
	return fmt.Errorf("%w: %s: %w", ErrStart, k.id, err)
}

// finish sees a started command through: it feeds it stdin, streams its
// output to out, kills it when it ends (or at timeout, or when ctx is
// done), and destroys the container. start is when the command started.
func (m *Manager) finish(ctx context.Context, k *container, stdin io.Reader, timeout time.Duration, start time.Time, out func(Event)) (Result, error) {
	res := Result{ID: k.id}
	detached := false // the container outlives Run (ErrNotReaped)
	defer func() {
		if !detached {
			k.destroy()
		}
	}()
	defer k.closePipes()
	if k.stdinW != nil {
		w := k.stdinW
		k.stdinW = nil // the copy closes it
		go func() {
			_, _ = io.Copy(w, stdin)
			w.Close()
		}()
	}
	o := &outputs{out: out}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); res.Stdout = o.pump(k.stdoutR, Stdout) }()
	go func() { defer pumps.Done(); res.Stderr = o.pump(k.stderrR, Stderr) }()

	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}

	var wr waitResult
	var reaped bool
	select {
	case wr = <-k.waitDone:
		reaped = true
	case <-timer:
		res.TimedOut = true
	case <-ctx.Done():
		res.Canceled = true
	}
	// The command's end ends the container: when the init of a PID
	// namespace dies the kernel kills the rest, and kill makes sure.
	m.kill(k.c, k.p)
	if !reaped {
		select {
		case wr = <-k.waitDone:
			reaped = true
		case <-time.After(killGrace):
		}
	}
	res.Duration = time.Since(start)
	if !reaped {
		// Leave the container to the waiter; it goes when the processes
		// finally die.
		k.stdoutR.Close()
		k.stderrR.Close()
		pumps.Wait()
		res.ExitCode, res.Signal = -1, unix.SIGKILL
		detached = true
		go func() { <-k.waitDone; k.destroy() }()
		return res, fmt.Errorf("%w: %s", ErrNotReaped, k.id)
	}

	// All writers are dead; drain what they wrote. A grace period guards
	// against a write end that somehow escaped the container.
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(killGrace):
		k.stdoutR.Close()
		k.stderrR.Close()
		<-drained
	}

	res.ExitCode, res.Signal = exitStatus(wr)
	if res.ExitCode != 0 {
		res.OOMKills = oomKills(k.c)
	}
	k.destroy()
	return res, nil
}

type waitResult struct {
	st  *os.ProcessState
	err error
}

func exitStatus(wr waitResult) (int, syscall.Signal) {
	if wr.st == nil {
		return -1, 0
	}
	ws, ok := wr.st.Sys().(syscall.WaitStatus)
	if !ok {
		return wr.st.ExitCode(), 0
	}
	if ws.Signaled() {
		return -1, ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// kill ends every process in the container: SIGKILL to the init of its PID
// namespace makes the kernel kill all the others; SIGKILL to each process
// still in its cgroup covers anything that would not be in it.
func (m *Manager) kill(c *libcontainer.Container, p *libcontainer.Process) {
	_ = p.Signal(unix.SIGKILL)
	_ = c.Signal(unix.SIGKILL)
	if pids, err := c.Processes(); err == nil {
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// run is a Spec checked and turned into what libcontainer takes.
type run struct {
	id     string
	env    []string
	cwd    string
	limits core.Limits
	config *configs.Config
}

// prepare validates spec and builds the container's configuration.
func (m *Manager) prepare(spec Spec) (*run, error) {
	if m.StateDir == "" {
		return nil, fmt.Errorf("%w: Manager.StateDir not set", ErrInvalidSpec)
	}
	id := spec.ID
	if id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = "run-" + hex.EncodeToString(b[:])
	}
	if err := validateID(id); err != nil {
		return nil, err
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("%w: empty argv", ErrInvalidSpec)
	}
	for _, a := range spec.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("%w: NUL byte in argv", ErrInvalidSpec)
		}
	}
	for _, dir := range []string{spec.WorkspaceDir, spec.Rootfs} {
		if dir != "" && !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("%w: %q is not an absolute path", ErrInvalidSpec, dir)
		}
	}
	env, err := mergeEnv(DefaultEnv, spec.Env)
	if err != nil {
		return nil, err
	}
	cwd, err := workdir(spec.Cwd)
	if err != nil {
		return nil, err
	}
	if spec.WorkspaceDir != "" {
		if fi, err := os.Stat(spec.WorkspaceDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: workspace %q is not a directory", ErrInvalidSpec, spec.WorkspaceDir)
		}
		// libcontainer would create a missing working directory: a write
		// to the workspace that nobody asked for. Resolve it the way the
		// container will see it (symbolic links confined to the workspace).
		rel := strings.TrimPrefix(strings.TrimPrefix(cwd, "/workspace"), "/")
		host, err := securejoin.SecureJoin(spec.WorkspaceDir, rel)
		if fi, serr := os.Stat(host); err != nil || serr != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: cwd %q is not a directory in the workspace", ErrInvalidSpec, spec.Cwd)
		}
	}
	ids := m.ids()
	if err := ids.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	rootfs := spec.Rootfs
	if rootfs == "" {
		if rootfs, err = m.prepareRoot(); err != nil {
			return nil, err
		}
	} else if fi, err := os.Stat(rootfs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: rootfs %q is not a directory", ErrInvalidSpec, rootfs)
	} else if err := searchable(rootfs, ids); err != nil {
		return nil, fmt.Errorf("%w: rootfs: %w", ErrInvalidSpec, err)
	}
	limits := spec.Limits.Or(m.Limits).Or(DefaultLimits)
	if limits.Memory < 4<<20 || limits.Pids < 1 || limits.CPUs <= 0 || limits.Tmp < 0 {
		return nil, fmt.Errorf("%w: limits %+v", ErrInvalidSpec, limits)
	}
	cfg, err := m.config(id, rootfs, spec.Rootfs == "", limits)
	if err != nil {
		return nil, err
	}
	ws, err := workspaceMount(spec.WorkspaceDir, spec.WorkspaceMapped, ids, limits.Tmp)
	if err != nil {
		return nil, err
	}
	cfg.Mounts = append(cfg.Mounts, ws)
	return &run{id: id, env: env, cwd: cwd, limits: limits, config: cfg}, nil
}

func validateID(id string) error {
	if len(id) > 128 {
		return fmt.Errorf("%w: id %q too long", ErrInvalidSpec, id)
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '+', r == '-', r == '.':
		default:
			return fmt.Errorf("%w: id %q: only letters, digits and _+-. allowed", ErrInvalidSpec, id)
		}
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%w: id %q", ErrInvalidSpec, id)
	}
	return nil
}

// mergeEnv returns base with extra added, a later variable replacing an
// earlier one of the same name.
func mergeEnv(base, extra []string) ([]string, error) {
	env := slices.Clone(base)
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("%w: env %q: want KEY=VALUE without NUL", ErrInvalidSpec, kv)
		}
		env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		env = append(env, kv)
	}
	return env, nil
}

// workdir resolves cwd against /workspace and refuses paths outside it.
func workdir(cwd string) (string, error) {
	const ws = "/workspace"
	if strings.IndexByte(cwd, 0) >= 0 {
		return "", fmt.Errorf("%w: NUL byte in cwd", ErrInvalidSpec)
	}
	p := path.Clean(cwd)
	if !path.IsAbs(p) {
		if p == ".." || strings.HasPrefix(p, "../") {
			return "", fmt.Errorf("%w: cwd %q escapes /workspace", ErrInvalidSpec, cwd)
		}
		p = path.Join(ws, p)
	}
	p = path.Clean(p)
	if p != ws && !strings.HasPrefix(p, ws+"/") {
		return "", fmt.Errorf("%w: cwd %q is not under /workspace", ErrInvalidSpec, cwd)
	}
	return p, nil
}

func (m *Manager) hostDirs() []string {
	if m.HostDirs != nil {
		return m.HostDirs
	}
	return DefaultHostDirs
}
