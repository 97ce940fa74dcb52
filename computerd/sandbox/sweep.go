package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// Sweep kills and removes every container left under StateDir by a
// previous process of this Manager's (one killed before it could destroy
// them), and returns their IDs. Call it at start-up, before any Run on the
// same StateDir: it would remove their containers too.
func (m *Manager) Sweep(ctx context.Context) ([]string, error) {
	return m.sweep(ctx, func(string) bool { return true })
}

// sweep sweeps the containers under StateDir whose IDs match.
func (m *Manager) sweep(ctx context.Context, match func(id string) bool) ([]string, error) {
	if m.StateDir == "" {
		return nil, fmt.Errorf("%w: Manager.StateDir not set", ErrInvalidSpec)
	}
	dir := m.containersDir()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var ids []string
	var errs []error
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return ids, err
		}
		id := e.Name()
		if !e.IsDir() || validateID(id) != nil || !match(id) {
			continue
		}
		if err := m.sweepOne(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", id, err))
			continue
		}
		ids = append(ids, id)
	}
	return ids, errors.Join(errs...)
}

// sweepWarm sweeps the warm containers under StateDir (see warm.go): what
// a helper that died left of its pool.
func (m *Manager) sweepWarm(ctx context.Context) ([]string, error) {
	return m.sweep(ctx, func(id string) bool { return strings.HasPrefix(id, warmPrefix) })
}

func (m *Manager) sweepOne(ctx context.Context, id string) error {
	c, err := libcontainer.Load(m.containersDir(), id)
	if err != nil {
		// No usable state (the process died between creating the
		// directory and saving the state): kill by cgroup and remove.
		if err := m.sweepCgroup(ctx, id); err != nil {
			return err
		}
		return os.RemoveAll(filepath.Join(m.containersDir(), id))
	}
	_ = c.Signal(unix.SIGKILL)
	if err := waitEmpty(ctx, func() ([]int, error) { return c.Processes() }); err != nil {
		return err
	}
	// A killed init leaves its cgroup before it is done dying (the init of
	// a PID namespace first waits for the rest of it): until it is a
	// zombie, libcontainer calls the container running.
	deadline := time.Now().Add(killGrace)
	for {
		err := c.Destroy()
		if !errors.Is(err, libcontainer.ErrRunning) || time.Now().After(deadline) {
			return err
		}
		_ = c.Signal(unix.SIGKILL)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sweepCgroup kills what the cgroup of container id holds and removes it,
// in whichever hierarchies it exists: a supervisor killed while
// libcontainer made the cgroup can leave it in some (cpuset, made first)
// and not in the others (the manager's Exists looks at devices only).
func (m *Manager) sweepCgroup(ctx context.Context, id string) error {
	cm, err := manager.New(&cgroups.Cgroup{Path: m.cgroupName(id), Resources: &cgroups.Resources{}})
	if err != nil {
		return err
	}
	if err := waitEmpty(ctx, cm.GetAllPids); err != nil {
		return err
	}
	return cm.Destroy()
}

// waitEmpty SIGKILLs the processes pids lists until it lists none.
func waitEmpty(ctx context.Context, pids func() ([]int, error)) error {
	deadline := time.Now().Add(killGrace)
	for {
		ps, err := pids()
		if err != nil || len(ps) == 0 {
			return nil // no cgroup left, or nothing in it
		}
		for _, pid := range ps {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d processes", ErrNotReaped, len(ps))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
