package fsstore

import "strings"

// MaxNameLen is the longest path component the store accepts, in bytes.
const MaxNameLen = 255

// MaxPathLen is the longest path the store accepts, in bytes.
const MaxPathLen = 4096

// CleanPath validates p and returns it relative to the workspace root with
// no leading or trailing slash ("" is the root). "." components vanish and
// ".." components are resolved lexically; a path that would climb above the
// root, holds a NUL byte, or has a component over MaxNameLen bytes fails with
// ErrInvalidPath.
func CleanPath(p string) (string, error) {
	if len(p) > MaxPathLen {
		return "", pathErr("check", p, ErrInvalidPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", pathErr("check", p, ErrInvalidPath)
	}
	parts := make([]string, 0, strings.Count(p, "/")+1)
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			if len(parts) == 0 {
				return "", pathErr("check", p, ErrInvalidPath)
			}
			parts = parts[:len(parts)-1]
		case len(c) > MaxNameLen:
			return "", pathErr("check", p, ErrInvalidPath)
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// splitPath returns the components of a clean path.
func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// parentName splits a clean, non-root path into its directory and last component.
func parentName(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// joinPath joins a clean directory path and a name.
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// validName reports whether name can be a directory entry.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= MaxNameLen &&
		strings.IndexByte(name, 0) < 0 && strings.IndexByte(name, '/') < 0
}

// inSubtree reports whether clean path p is root or lies beneath it.
func inSubtree(p, root string) bool {
	return root == "" || p == root || strings.HasPrefix(p, root+"/")
}

// depth is the number of components of a clean path.
func depth(p string) int {
	if p == "" {
		return 0
	}
	return strings.Count(p, "/") + 1
}
