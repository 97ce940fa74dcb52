package daemon

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"computerd/computerd/fusefs"
	"computerd/fsstore"
)

// dyingWait is how long a start waits for a dying holder of the data
// directory's lock to exit once its FUSE connections are aborted.
const dyingWait = 10 * time.Second

// releaseDyingHolder frees dataDir's lock from a previous computerd that
// was killed but cannot finish dying: a thread of it waits on a FUSE
// request to a file system it served itself (its revision view, mounted
// under the data directory), an answer no thread is left to give, so the
// process never exits and keeps the lock. computerd reads nothing through
// its own mounts, but the kernel does on its behalf while it makes an
// exec's overlay; a SIGKILL in that window leaves such a process.
// Aborting the connections of the FUSE mounts under the data directory
// fails those requests and lets the process go. A live holder is left
// alone (the start then fails on the lock, naming it).
func releaseDyingHolder(dataDir string, log *slog.Logger) error {
	pid, held, err := fsstore.LockHolder(dataDir)
	if err != nil || !held || pid <= 0 || pid == os.Getpid() || !dying(pid) {
		return nil
	}
	aborted, err := fusefs.AbortUnder(dataDir)
	log.Warn("the previous computerd was killed but had not exited; aborted its FUSE connections",
		"pid", pid, "mounts", aborted, "err", err)
	for deadline := time.Now().Add(dyingWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, held, _ := fsstore.LockHolder(dataDir); !held {
			return nil
		}
	}
	return fmt.Errorf("the previous computerd (pid %d) was killed but still holds %s after its FUSE connections were aborted", pid, dataDir)
}

// dying reports whether process pid has been killed but not yet exited:
// its main thread is a zombie (it ended while other threads have not), or
// a SIGKILL is pending for it.
func dying(pid int) bool {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "State":
			if bytes.HasPrefix(val, []byte("Z")) || bytes.HasPrefix(val, []byte("X")) {
				return true
			}
		case "ShdPnd", "SigPnd":
			mask, err := strconv.ParseUint(string(val), 16, 64)
			if err == nil && mask&(1<<(9-1)) != 0 { // SIGKILL is signal 9
				return true
			}
		}
	}
	return false
}
