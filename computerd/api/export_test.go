package api

import (
	"archive/tar"
	"io"
)

// MatchGlob exposes the glob matcher of find and grep to the black-box tests.
func MatchGlob(pattern, p string) (bool, error) {
	g, err := compileGlob(pattern)
	if err != nil {
		return false, err
	}
	return g.match(p), nil
}

// ReadArchive reads an archive as attach does, calling fn with each
// entry's header, clean name and contents (nil for entries of other types
// than regular files); it returns the first error, and what the archive
// made beyond what was sent.
func ReadArchive(body io.Reader, fn func(hdr *tar.Header, name string, contents io.Reader) error) (made int64, err error) {
	a, err := openArchive(body)
	if err != nil {
		return 0, err
	}
	defer a.close()
	for {
		hdr, name, err := a.next()
		if err == io.EOF {
			return a.bound.Made(), nil
		}
		if err != nil {
			return a.bound.Made(), err
		}
		var contents io.Reader
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			contents = a.contents()
		}
		if err := fn(hdr, name, contents); err != nil {
			return a.bound.Made(), err
		}
	}
}
