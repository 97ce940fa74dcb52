package fsstore

import (
	"strings"

	"computerd/core"
)

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
	return name != "" && name != "." && name != ".." && len(name) <= core.MaxNameLen &&
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
