package api_test

import (
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"time"

	"computerd/computerd/api"
)

// oldMatch is the recursive matcher find and grep used before, kept as the
// model the matcher must agree with (it costs exponential time in the
// number of "**", so only small cases go through it).
func oldMatch(pattern, p string) (bool, error) {
	if !strings.Contains(pattern, "/") {
		return path.Match(pattern, path.Base(p))
	}
	return oldSegments(strings.Split(pattern, "/"), strings.Split(p, "/"))
}

func oldSegments(pat, segs []string) (bool, error) {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if ok, err := oldSegments(pat[1:], segs[i:]); ok || err != nil {
					return ok, err
				}
			}
			return false, nil
		}
		if len(segs) == 0 {
			return false, nil
		}
		ok, err := path.Match(pat[0], segs[0])
		if !ok || err != nil {
			return false, err
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0, nil
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"*.go", "src/main.go", true},
		{"*.go", "main.go", true},
		{"*.go", "src/main.c", false},
		{"m?in.go", "src/main.go", true},
		{"[a-m]*.go", "src/main.go", true},
		{"[^a-m]*.go", "src/main.go", false},
		{"**", "a/b/c", true},
		{"src/**/util.go", "src/util/util.go", true},
		{"src/**/util.go", "src/util.go", true},
		{"src/**/util.go", "src/a/b/c/util.go", true},
		{"src/**/util.go", "lib/util/util.go", false},
		{"src/*.go", "src/main.go", true},
		{"src/*.go", "src/util/util.go", false},
		{"src/*", "src", false},
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/main.go", true},
		{"**/*.go", "a/b/main.c", false},
		{"a/**", "a", true},
		{"a/**", "a/b/c", true},
		{"a/**", "b/c", false},
		{"**/b/**", "a/b/c", true},
		{"**/b/**", "b", true},
		{"**/b/**", "a/c", false},
		{"**/**/x", "x", true},
		{"a/**/b/**/c", "a/b/b/c/c", true},
		{"a/**/b/**/c", "a/c/b", false},
		{"a/**/b/c", "a/b/c/b/c", true},
		{"a/**/b/c", "a/b/c/b/d", false},
		{"a//b", "a//b", true},
		{"a/b/", "a/b", false},
		{"[ab]/?/**/[^x]*", "a/q/r/s/y1", true},
		{"[ab]/?/**/[^x]*", "a/q/r/s/x1", false},
	} {
		t.Run(fmt.Sprintf("%s~%s", tc.pattern, tc.path), func(t *testing.T) {
			got, err := api.MatchGlob(tc.pattern, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			old, err := oldMatch(tc.pattern, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || old != tc.want {
				t.Fatalf("got %v, the old matcher %v, want %v", got, old, tc.want)
			}
		})
	}
}

// Random small patterns and paths over a few names agree with the old matcher.
func TestGlobMatchModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	pieces := []string{"**", "*", "a", "b", "?", "[ab]", "a*", "*b", ""}
	names := []string{"a", "b", "ab", "ba", "c", ""}
	for n := 0; n < 20000; n++ {
		pat := make([]string, 1+rng.IntN(6))
		for i := range pat {
			pat[i] = pieces[rng.IntN(len(pieces))]
		}
		segs := make([]string, 1+rng.IntN(7))
		for i := range segs {
			segs[i] = names[rng.IntN(len(names))]
		}
		pattern, p := strings.Join(pat, "/"), strings.Join(segs, "/")
		got, err := api.MatchGlob(pattern, p)
		if err != nil {
			t.Fatalf("seed %d: %q: %v", seed, pattern, err)
		}
		want, _ := oldMatch(pattern, p)
		if got != want {
			t.Fatalf("seed %d: %q against %q: got %v, the old matcher %v", seed, pattern, p, got, want)
		}
	}
}

// Many "**" against a deep path cost linear time, not exponential: eight
// of them against 41 levels took the old matcher 32 s.
func TestGlobPathological(t *testing.T) {
	pattern := strings.Repeat("**/", 8) + "x"
	p := strings.Repeat("a/", 40) + "y"
	start := time.Now()
	got, err := api.MatchGlob(pattern, p)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("%q against a %d-level path took %v, want under 100 ms", pattern, 41, took)
	}
	if got {
		t.Fatalf("%q matched %q", pattern, p)
	}
	pattern = strings.Repeat("**/a/", 20) + "**/y"
	start = time.Now()
	if ok, _ := api.MatchGlob(pattern, p); !ok {
		t.Fatalf("%q did not match %q", pattern, p)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("%q took %v, want under 100 ms", pattern, took)
	}
}

func TestGlobBad(t *testing.T) {
	for _, pattern := range []string{"[", "a/[", "**/b/[a-", `x\`} {
		if _, err := api.MatchGlob(pattern, "x/y"); err == nil {
			t.Errorf("%q: no error", pattern)
		}
	}
}
