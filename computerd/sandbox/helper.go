package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"computerd/computerd/idmap"
	"computerd/computerd/procfd"
	"computerd/core"
)

// Running containers from a helper process. A container's init is the
// binary that started it, re-executed, and Go runs every package's
// initialisation in it before libcontainer's init code: in computerd's
// image (the metrics client, the CLI library, SQLite, FUSE, ...) that made
// a container's start about 10 ms slower at the median than from a binary
// of this package alone (docs/SANDBOX.md). So a Manager whose Helper is set
// starts that small binary (computerd-sandbox, whose main is HelperMain)
// once, and sends it every Run over a socket: the helper runs the
// containers with a Manager of its own and streams their events back.
//
// The helper dies with the process that started it (parent-death signal),
// and its containers with it; a Run in flight then fails, and the next Run
// starts a new helper. Stdin is sent along with the run, so it must be in
// memory (a *bytes.Reader or *strings.Reader); a Run with another kind of
// Stdin runs in-process.

// helperConfig is the helper's Manager.
type helperConfig struct {
	StateDir  string        `json:"state_dir"`
	Limits    core.Limits   `json:"limits"`
	Timeout   time.Duration `json:"timeout"`
	HostDirs  []string      `json:"host_dirs"`
	IDs       idmap.Range   `json:"ids"`
	NoSeccomp bool          `json:"no_seccomp"`
	Warm      int           `json:"warm"`
}

// helperSpec is a Spec on the wire.
type helperSpec struct {
	ID           string        `json:"id"`
	Argv         []string      `json:"argv"`
	Env          []string      `json:"env"`
	Cwd          string        `json:"cwd"`
	Stdin        []byte        `json:"stdin"`
	HasStdin     bool          `json:"has_stdin"`
	WorkspaceDir string        `json:"workspace_dir"`
	Mapped       bool          `json:"workspace_mapped"`
	Rootfs       string        `json:"rootfs"`
	Limits       core.Limits   `json:"limits"`
	Timeout      time.Duration `json:"timeout"`
}

// helperMsg is one message either way: run and cancel to the helper; event
// and result from it. Req numbers a run.
type helperMsg struct {
	Op     string      `json:"op"`
	Req    uint64      `json:"req"`
	Spec   *helperSpec `json:"spec,omitempty"`
	Seq    uint64      `json:"seq,omitempty"`
	Stream string      `json:"stream,omitempty"`
	Data   []byte      `json:"data,omitempty"`
	Result *Result     `json:"result,omitempty"`
	Err    string      `json:"err,omitempty"`
	Kind   string      `json:"kind,omitempty"` // the sentinel Err wraps
}

// helperFd is the helper's end of the socket.
const helperFd = 3

var errorKinds = map[string]error{"invalid": ErrInvalidSpec, "start": ErrStart, "notreaped": ErrNotReaped, "notfound": ErrNotFound}

// remoteError is an error from the helper: its message, and the sentinel
// it wrapped there.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

func errorKind(err error) string {
	if errors.Is(err, ErrNotFound) {
		return "notfound" // before "start", which it is too
	}
	for k, s := range errorKinds {
		if errors.Is(err, s) {
			return k
		}
	}
	return ""
}

// HelperMain is the main of the helper binary: its first argument is its
// Manager's configuration, descriptor 3 its socket. It serves runs until
// the socket closes (its parent closed the Manager or died), then kills
// what still runs and exits. Call it after Init.
func HelperMain() {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	unix.CloseOnExec(helperFd) // never inherited by a container
	closeInherited()
	if os.Getppid() == 1 {
		os.Exit(1) // the parent died before the signal was set
	}
	var cfg helperConfig
	if len(os.Args) < 2 || json.Unmarshal([]byte(os.Args[1]), &cfg) != nil {
		fmt.Fprintln(os.Stderr, "computerd-sandbox: started by computerd only (bad configuration argument)")
		os.Exit(2)
	}
	m := &Manager{StateDir: cfg.StateDir, Limits: cfg.Limits, Timeout: cfg.Timeout, HostDirs: cfg.HostDirs, IDs: cfg.IDs, NoSeccomp: cfg.NoSeccomp, Warm: cfg.Warm}
	if err := m.Warmup(); err != nil {
		// Runs still work: each makes its container.
		fmt.Fprintln(os.Stderr, "computerd-sandbox: no warm containers:", err)
	}
	serveHelper(m, os.NewFile(helperFd, "computerd"))
	m.Close()
	os.Exit(0)
}

// closeInherited closes the descriptors the helper inherited beyond its
// socket: anything its parent left open without close-on-exec (go-fuse's
// /dev/fuse descriptors, for one) would otherwise live as long as the
// helper, holding the parent's FUSE connections after their unmount. The
// Go runtime's own descriptors are all close-on-exec, so they stay.
func closeInherited() {
	for _, fd := range procfd.Inheritable() {
		if fd > helperFd {
			unix.Close(fd)
		}
	}
}

func serveHelper(m *Manager, conn io.ReadWriteCloser) {
	defer conn.Close()
	var (
		mu     sync.Mutex // enc and cancel
		enc    = json.NewEncoder(conn)
		cancel = map[uint64]context.CancelFunc{}
		wg     sync.WaitGroup
	)
	send := func(msg helperMsg) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(msg)
	}
	dec := json.NewDecoder(bufio.NewReader(conn))
	for {
		var msg helperMsg
		if err := dec.Decode(&msg); err != nil {
			break
		}
		switch {
		case msg.Op == "run" && msg.Spec != nil:
			ctx, stop := context.WithCancel(context.Background())
			mu.Lock()
			cancel[msg.Req] = stop
			mu.Unlock()
			wg.Add(1)
			go func(req uint64, hs helperSpec) {
				defer wg.Done()
				defer stop()
				spec := Spec{ID: hs.ID, Argv: hs.Argv, Env: hs.Env, Cwd: hs.Cwd, WorkspaceDir: hs.WorkspaceDir,
					WorkspaceMapped: hs.Mapped,
					Rootfs:          hs.Rootfs, Limits: hs.Limits, Timeout: hs.Timeout}
				if hs.HasStdin {
					spec.Stdin = bytes.NewReader(hs.Stdin)
				}
				res, err := m.Run(ctx, spec, func(e Event) {
					send(helperMsg{Op: "event", Req: req, Seq: e.Seq, Stream: e.Stream, Data: e.Data})
				})
				reply := helperMsg{Op: "result", Req: req, Result: &res}
				if err != nil {
					reply.Err, reply.Kind = err.Error(), errorKind(err)
				}
				mu.Lock()
				delete(cancel, req)
				mu.Unlock()
				send(reply)
			}(msg.Req, *msg.Spec)
		case msg.Op == "cancel":
			mu.Lock()
			if stop := cancel[msg.Req]; stop != nil {
				stop()
			}
			mu.Unlock()
		}
	}
	// The parent is gone or done: end every run (Run kills and destroys).
	mu.Lock()
	for _, stop := range cancel {
		stop()
	}
	mu.Unlock()
	wg.Wait()
}

// helperClient is a Manager's connection to its helper.
type helperClient struct {
	conn   *os.File
	exited chan struct{} // closed when the helper process has ended
	exitOK bool          // set before exited closes: it ended with status 0
	mu     sync.Mutex    // enc, next, runs, err
	enc    *json.Encoder
	next   uint64
	runs   map[uint64]*remoteRun
	err    error // set once the connection broke
}

type remoteRun struct {
	out    func(Event)
	result chan helperMsg // buffered: the reader never waits on it
}

// helper returns the Manager's helper, starting one if there is none or
// the last one died.
func (m *Manager) helper() (*helperClient, error) {
	m.helperMu.Lock()
	defer m.helperMu.Unlock()
	if c := m.helperConn; c != nil {
		c.mu.Lock()
		alive := c.err == nil
		c.mu.Unlock()
		select {
		case <-c.exited:
			alive = false // its reader may not have seen the end yet
		default:
		}
		if alive {
			return c, nil
		}
		// The last helper died (it ends only when told to, and then
		// cleans up): its warm containers died with it, and their state
		// and cgroups go before a new helper makes its own.
		<-c.exited
		if !c.exitOK {
			_, _ = m.sweepWarm(context.Background())
		}
	}
	cfg, err := json.Marshal(helperConfig{StateDir: m.StateDir, Limits: m.Limits, Timeout: m.Timeout, HostDirs: m.HostDirs, IDs: m.IDs, NoSeccomp: m.NoSeccomp, Warm: m.Warm})
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox helper: socketpair: %w", err)
	}
	// Non-blocking, so that the runtime's poller serves it and Close ends
	// a read in progress (a blocking read would keep the descriptor, and
	// the helper would never see the end of its input).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("sandbox helper: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "sandbox-helper"), os.NewFile(uintptr(fds[1]), "computerd")
	cmd := exec.Command(m.Helper, string(cfg))
	cmd.ExtraFiles = []*os.File{child} // descriptor 3
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	// The parent-death signal fires when the thread that forked the helper
	// ends: fork it from a thread locked for the helper's whole life.
	c := &helperClient{conn: parent, exited: make(chan struct{}), enc: json.NewEncoder(parent), runs: map[uint64]*remoteRun{}}
	started := make(chan error, 1)
	go func() {
		defer close(c.exited)
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.exitOK = cmd.Wait() == nil
		parent.Close() // unblocks the reader if the helper died
	}()
	err = <-started
	child.Close()
	if err != nil {
		parent.Close()
		return nil, fmt.Errorf("sandbox helper %s: %w", m.Helper, err)
	}
	go c.read()
	m.helperConn = c
	return c, nil
}

// read dispatches the helper's messages until the connection breaks; then
// every run in flight fails.
func (c *helperClient) read() {
	dec := json.NewDecoder(bufio.NewReader(c.conn))
	var err error
	for {
		var msg helperMsg
		if err = dec.Decode(&msg); err != nil {
			break
		}
		c.mu.Lock()
		r := c.runs[msg.Req]
		if msg.Op == "result" {
			delete(c.runs, msg.Req)
		}
		c.mu.Unlock()
		switch {
		case r == nil:
		case msg.Op == "event":
			r.out(Event{Seq: msg.Seq, Stream: msg.Stream, Data: msg.Data})
		case msg.Op == "result":
			r.result <- msg
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("sandbox helper: connection lost: %w", err)
	runs := c.runs
	c.runs = map[uint64]*remoteRun{}
	c.mu.Unlock()
	c.conn.Close()
	for _, r := range runs {
		r.result <- helperMsg{Op: "result", Err: "sandbox helper died before the container ended", Kind: "start"}
	}
}

// send registers out as a run's receiver (if r is not nil) and sends msg.
func (c *helperClient) send(msg helperMsg, r *remoteRun) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if r != nil {
		c.next++
		msg.Req = c.next
		c.runs[msg.Req] = r
	}
	if err := c.enc.Encode(msg); err != nil {
		delete(c.runs, msg.Req)
		// The connection is broken (the helper died): say so now, so that
		// the next Run starts a new helper rather than waiting for the
		// reader to see the end.
		c.err = fmt.Errorf("sandbox helper: %w", err)
		return 0, c.err
	}
	return msg.Req, nil
}

// inMemory returns the unread bytes of an in-memory reader (a
// *bytes.Reader or *strings.Reader) without consuming them.
func inMemory(r io.Reader) ([]byte, bool) {
	mem, ok := r.(interface {
		io.ReaderAt
		Len() int
		Size() int64
	})
	if !ok {
		return nil, false
	}
	b := make([]byte, mem.Len())
	_, _ = mem.ReadAt(b, mem.Size()-int64(mem.Len()))
	return b, true
}

// runHelper is Run through the helper; ok is false if spec cannot go to
// the helper (its Stdin is not in memory).
func (m *Manager) runHelper(ctx context.Context, spec Spec, out func(Event)) (res Result, ok bool, err error) {
	hs := &helperSpec{ID: spec.ID, Argv: spec.Argv, Env: spec.Env, Cwd: spec.Cwd, WorkspaceDir: spec.WorkspaceDir,
		Mapped: spec.WorkspaceMapped,
		Rootfs: spec.Rootfs, Limits: spec.Limits, Timeout: spec.Timeout}
	if spec.Stdin != nil {
		if hs.Stdin, hs.HasStdin = inMemory(spec.Stdin); !hs.HasStdin {
			return Result{}, false, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, true, fmt.Errorf("%w: %w", ErrStart, context.Cause(ctx))
	}
	c, err := m.helper()
	if err != nil {
		return Result{}, true, fmt.Errorf("%w: %w", ErrStart, err)
	}
	r := &remoteRun{out: out, result: make(chan helperMsg, 1)}
	req, err := c.send(helperMsg{Op: "run", Spec: hs}, r)
	if err != nil {
		return Result{}, true, fmt.Errorf("%w: %w", ErrStart, err)
	}
	var msg helperMsg
	select {
	case msg = <-r.result:
	case <-ctx.Done():
		_, _ = c.send(helperMsg{Op: "cancel", Req: req}, nil)
		msg = <-r.result
	}
	if msg.Result != nil {
		res = *msg.Result
	}
	if msg.Err != "" {
		err = &remoteError{msg: msg.Err, kind: errorKinds[msg.Kind]}
		if msg.Kind == "notfound" {
			err = &notFoundError{name: spec.Argv[0]}
		}
	}
	return res, true, err
}

// Close stops the Manager's helper, if it started one, and waits (up to
// killGrace) for it to end: the runs it still has are killed and its
// containers destroyed. It destroys the unused warm containers, and waits
// for in-process Runs on warm containers to end; other in-process runs
// are not affected.
func (m *Manager) Close() error {
	m.closePool()
	m.helperMu.Lock()
	defer m.helperMu.Unlock()
	c := m.helperConn
	if c == nil {
		return nil
	}
	m.helperConn = nil
	err := c.conn.Close()
	select {
	case <-c.exited:
	case <-time.After(killGrace):
		err = errors.Join(err, errors.New("sandbox helper: still running after Close"))
	}
	return err
}
