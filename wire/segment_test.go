package wire_test

import (
	"errors"
	"testing"

	"computerd/core"
	"computerd/wire"
)

func TestPathSegment(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string // want "" : refused
	}{
		{"name", "proj-1.a_b", "proj-1.a_b"},
		{"three dots", "...", "..."},
		{"dot inside", "a..b", "a..b"},
		{"space", "a b", "a%20b"},
		{"percent not a slash or dot", "50%25", "50%2525"},
		{"bad escape", "%zz", "%25zz"},
		{"empty", "", ""},
		{"dot", ".", ""},
		{"dot dot", "..", ""},
		{"slash", "a/b", ""},
		{"leading slash", "/a", ""},
		{"backslash", `a\b`, ""},
		{"encoded dot dot", "%2e%2e", ""},
		{"encoded dot dot, upper case", "%2E%2E", ""},
		{"half encoded", ".%2e", ""},
		{"encoded dot", "%2e", ""},
		{"encoded slash", "a%2Fb", ""},
		{"encoded backslash", "a%5cb", ""},
		{"dot dot and encoded slash", "..%2f", ""},
		{"encoded twice", "%252e%252e", ""},
		{"slash encoded twice", "a%252fb", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.PathSegment("exec id", tc.in)
			if tc.want == "" {
				if !errors.Is(err, core.ErrInvalidArgument) {
					t.Fatalf("PathSegment(%q) = %q, %v; want core.ErrInvalidArgument", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PathSegment(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}
