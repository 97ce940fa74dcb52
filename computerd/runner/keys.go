package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"computerd/core"
)

// checkKey refuses a request whose idempotency key names an exec of
// another command (sameCommand); a key not yet used, or none, passes.
func (r *Runner) checkKey(ctx context.Context, req Request, envNames []string) error {
	if req.Key == "" {
		return nil
	}
	rec, err := r.Store.ExecByKey(ctx, req.Tenant, req.Workspace.ID, req.Key)
	switch {
	case errors.Is(err, core.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return sameCommand(rec, req.Argv, req.Cwd, envNames)
}

// sameCommand refuses the reuse of exec rec's idempotency key for
// another command: a key names one exec, and a retry returns that exec's
// result, so a request that differs from it in what the journal keeps of
// a request (argv, working directory, the names of the environment's
// variables; never their values) would get the result of a command it did
// not ask for. It is a conflict (409), not a replay. envNames is sorted.
func sameCommand(rec core.Exec, argv []string, cwd string, envNames []string) error {
	if slices.Equal(rec.Argv, argv) && rec.Cwd == cwd && slices.Equal(rec.EnvNames, envNames) {
		return nil
	}
	return fmt.Errorf("exec key %q already names exec %s, of another command (%s): a retry sends the same argv, cwd and environment names, a new command a new key: %w",
		rec.Key, rec.ID, commandLine(rec.Argv), core.ErrConflict)
}
