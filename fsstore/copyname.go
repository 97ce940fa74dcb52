package fsstore

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxWorkspaceName is the longest workspace name (validWorkspaceName).
const maxWorkspaceName = 128

// copyRoom is the longest name CopyName returns: it leaves 4 bytes for the
// "-2" ... "-100" ApplyOrKeep adds when a name is taken.
const copyRoom = maxWorkspaceName - 4

// CopyName names a workspace that keeps changes of workspace base:
// "BASE.KIND-SUFFIX" (kind is "conflict" or "interrupted"). Every valid
// base gives a valid workspace name: a suffix of other characters, or too
// long, gives way to its hash, and a base too long for the rest is cut and
// followed by a hash of the whole base, so copies of two long bases that
// share a prefix never share a name.
func CopyName(base, kind, suffix string) string {
	infix := "." + kind + "-"
	if name := base + infix + suffix; len(name) <= copyRoom && validWorkspaceName(name) {
		return name
	}
	// The shortest a cut base gets is one byte, "-" and its hash.
	const cutBase = 1 + 1 + 16
	if !nameChars(suffix) || len(suffix) > copyRoom-cutBase-len(infix) {
		suffix = hashTag(suffix)
	}
	if room := copyRoom - len(infix) - len(suffix); len(base) > room {
		base = base[:room-17] + "-" + hashTag(base)
	}
	return base + infix + suffix
}

// hashTag is 16 hex digits of s's SHA-256.
func hashTag(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// nameChars reports whether s is a non-empty run of workspace-name characters.
func nameChars(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != ""
}
