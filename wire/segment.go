package wire

import (
	"fmt"
	"net/url"
	"strings"

	"computerd/core"
)

// PathSegment escapes v, a value a client puts in a request's path (a
// workspace name, an exec or run id, a skill name), as exactly one path
// segment, or refuses it with core.ErrInvalidArgument; what names what v
// is, for the message. Refused are the values a server or a proxy on the
// way could take for something other than one segment: an empty one, "."
// or "..", which path cleaning removes (Go's ServeMux redirects to the
// cleaned path, another route; computerd answers 400), and one holding a
// slash or a backslash, as such or percent-encoded ("%2e%2e", "a%2Fb",
// "%252e%252e") for a server that decodes a path more than once. No
// workspace name, id or skill name of computerd's holds any of these.
// (A file's path is many segments: package client cleans it and escapes
// each, so a file may have any name a workspace allows.)
func PathSegment(what, v string) (string, error) {
	for d, depth := v, 0; ; depth++ {
		if d == "" || d == "." || d == ".." || strings.ContainsAny(d, `/\`) {
			return "", fmt.Errorf("%s %q: not one path segment (empty, . or .., or holding a slash, percent-encoded or not): %w",
				what, v, core.ErrInvalidArgument)
		}
		next, err := url.PathUnescape(d)
		if err != nil || next == d || depth == maxUnescape {
			break
		}
		d = next
	}
	return url.PathEscape(v), nil
}

// maxUnescape bounds how many decodings PathSegment looks through: past
// a few, a value would need a server that decodes it as often.
const maxUnescape = 8
