package core

import "strings"

// MaxNameLen is the longest path component the store accepts, in bytes.
const MaxNameLen = 255

// MaxPathLen is the longest path the store accepts, in bytes.
const MaxPathLen = 4096

// MaxFileSize is the largest size a file can have. Writes and truncates past
// it fail with ErrInvalidArgument (sizes near 1<<63 would overflow offsets).
const MaxFileSize int64 = 1 << 62

// CleanPath validates p and returns it relative to the workspace root with
// no leading or trailing slash ("" is the root). "." components vanish and
// ".." components are resolved lexically; a path that would climb above the
// root, holds a NUL byte, or has a component over MaxNameLen bytes fails with
// ErrInvalidPath.
func CleanPath(p string) (string, error) {
	if len(p) > MaxPathLen {
		return "", &PathError{Op: "check", Path: p, Err: ErrInvalidPath}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", &PathError{Op: "check", Path: p, Err: ErrInvalidPath}
	}
	parts := make([]string, 0, strings.Count(p, "/")+1)
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			if len(parts) == 0 {
				return "", &PathError{Op: "check", Path: p, Err: ErrInvalidPath}
			}
			parts = parts[:len(parts)-1]
		case len(c) > MaxNameLen:
			return "", &PathError{Op: "check", Path: p, Err: ErrInvalidPath}
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}
