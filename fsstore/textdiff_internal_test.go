package fsstore

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestDiffLinesRoundTrip checks that every edit script, applied, turns a into b.
func TestDiffLinesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"a\n", "b\n", "c\n", "d\n"}
	for i := 0; i < 2000; i++ {
		a := make([]string, r.IntN(12))
		b := make([]string, r.IntN(12))
		for j := range a {
			a[j] = words[r.IntN(len(words))]
		}
		for j := range b {
			b[j] = words[r.IntN(len(words))]
		}
		var gotA, gotB []string
		for _, e := range diffLines(a, b) {
			if e.kind != '+' {
				gotA = append(gotA, e.line)
			}
			if e.kind != '-' {
				gotB = append(gotB, e.line)
			}
		}
		if strings.Join(gotA, "") != strings.Join(a, "") || strings.Join(gotB, "") != strings.Join(b, "") {
			t.Fatalf("case %d: script does not reproduce a=%q b=%q", i, a, b)
		}
	}
}

func TestWriteHunks(t *testing.T) {
	a := splitLines([]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"))
	b := splitLines([]byte("1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\neleven"))
	var buf bytes.Buffer
	writeHunks(&buf, a, b, 3)
	want := "@@ -2,9 +2,10 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n 9\n 10\n+eleven\n\\ No newline at end of file\n"
	if got := buf.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
