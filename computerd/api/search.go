package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"

	"computerd/core"
	"computerd/wire"
)

// matchGlob matches a slash-separated path against pattern, where each
// pattern segment is a path.Match pattern and "**" matches any number of
// segments. A pattern without a slash matches the base name only.
func matchGlob(pattern, p string) (bool, error) {
	if !strings.Contains(pattern, "/") {
		return path.Match(pattern, path.Base(p))
	}
	return matchSegments(strings.Split(pattern, "/"), strings.Split(p, "/"))
}

func matchSegments(pat, segs []string) (bool, error) {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if ok, err := matchSegments(pat[1:], segs[i:]); ok || err != nil {
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

// globFilter checks ?name= (or the given parameter) and returns a matcher
// on paths relative to root; an empty pattern matches everything.
func globFilter(r *http.Request, param string) (func(rel string) bool, error) {
	pattern := r.URL.Query().Get(param)
	if pattern == "" {
		return func(string) bool { return true }, nil
	}
	if _, err := matchGlob(pattern, "x/y"); err != nil {
		return nil, badRequest("%s=%q: bad glob: %v", param, pattern, err)
	}
	return func(rel string) bool {
		ok, _ := matchGlob(pattern, rel)
		return ok
	}, nil
}

// relTo returns p relative to root ("" when equal).
func relTo(root, p string) string {
	if root == "" {
		return p
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
}

// find lists the paths under ?path= whose name (or relative path, when the
// pattern has a slash) matches ?name=, optionally only ?type=f|d|l.
func (s *Server) find(w http.ResponseWriter, r *http.Request) error {
	sn, err := s.snapshot(r)
	if err != nil {
		return err
	}
	root, err := core.CleanPath(r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	match, err := globFilter(r, "name")
	if err != nil {
		return err
	}
	typ := r.URL.Query().Get("type")
	if typ != "" && typ != "f" && typ != "d" && typ != "l" {
		return badRequest("type=%q: want f, d or l", typ)
	}
	out := []string{}
	err = sn.Walk(r.Context(), root, func(p string, st core.Stat) error {
		if p == root && st.IsDir() {
			return nil
		}
		switch {
		case typ == "f" && !st.Mode.IsRegular(), typ == "d" && !st.IsDir(), typ == "l" && st.Mode&fs.ModeSymlink == 0:
			return nil
		}
		if match(relTo(root, p)) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// grepOptions are a grep request's parameters.
type grepOptions struct {
	re      *regexp.Regexp
	fileRe  *regexp.Regexp // re for a whole file (^ and $ at every line); nil: no whole-file test
	context int
	max     int // stop after this many matches (0: no limit)
}

// grep streams, as NDJSON wire.Match lines, the lines under ?path= that match
// the regular expression ?pattern= (?i=1: ignoring case), with ?context=N
// lines around each, in files whose path matches ?glob=. Binary files (a NUL
// in their first 8 KiB) are skipped.
func (s *Server) grep(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	expr := q.Get("pattern")
	if expr == "" {
		return badRequest("grep: pattern is required")
	}
	if boolParam(r, "i") {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return badRequest("grep: bad regular expression: %v", err)
	}
	ctxLines, err := intParam(r, "context", 0)
	if err != nil {
		return err
	}
	maxMatches, err := intParam(r, "max", 0)
	if err != nil {
		return err
	}
	opt := grepOptions{re: re, context: int(min(ctxLines, 1000)), max: int(maxMatches)}
	if !strings.Contains(expr, `\A`) && !strings.Contains(expr, `\z`) {
		opt.fileRe, _ = regexp.Compile("(?m)" + expr)
	}
	match, err := globFilter(r, "glob")
	if err != nil {
		return err
	}
	sn, err := s.snapshot(r)
	if err != nil {
		return err
	}
	root, err := core.CleanPath(q.Get("path"))
	if err != nil {
		return err
	}
	if _, err := sn.Stat(r.Context(), root); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	found := 0
	var buf bytes.Buffer
	err = sn.ReadTree(r.Context(), root, func(p string, st core.Stat, body io.Reader) error {
		if body == nil || !match(relTo(root, p)) {
			return nil
		}
		if st.Size <= wholeFileGrep && opt.fileRe != nil {
			// Most files do not match: one pass of the regexp over the
			// whole file settles that, without splitting it into lines.
			buf.Reset()
			if _, err := buf.ReadFrom(body); err != nil {
				return err
			}
			data := buf.Bytes()
			if bytes.IndexByte(data[:min(len(data), 8<<10)], 0) >= 0 || !opt.fileRe.Match(data) {
				return nil
			}
			body = bytes.NewReader(data)
		}
		n, err := grepFile(p, body, opt, opt.max-found, enc)
		found += n
		if err != nil {
			return err
		}
		if opt.max > 0 && found >= opt.max {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	return bw.Flush()
}

var errStop = errors.New("stop")

// wholeFileGrep is the largest file grep reads whole to test it at once;
// larger files are scanned line by line, streaming.
const wholeFileGrep = 4 << 20

// grepFile writes the matches of one file; it returns how many it found.
// budget <= 0 means no limit.
func grepFile(p string, body io.Reader, opt grepOptions, budget int, enc *json.Encoder) (int, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	if head, _ := br.Peek(8 << 10); bytes.IndexByte(head, 0) >= 0 {
		return 0, nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var before []wire.Match // the last opt.context lines
	after := 0              // context lines still owed after a match
	last := 0               // the last line written
	found := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if opt.re.MatchString(line) {
			if last > 0 && n-len(before) > last+1 && opt.context > 0 {
				if err := enc.Encode(wire.Match{Path: p, Break: true}); err != nil {
					return found, err
				}
			}
			for _, b := range before {
				if err := enc.Encode(b); err != nil {
					return found, err
				}
			}
			before = before[:0]
			if err := enc.Encode(wire.Match{Path: p, Line: n, Text: line}); err != nil {
				return found, err
			}
			found, last, after = found+1, n, opt.context
			if budget > 0 && found >= budget {
				return found, nil
			}
			continue
		}
		if after > 0 {
			after--
			last = n
			if err := enc.Encode(wire.Match{Path: p, Line: n, Text: line, Context: true}); err != nil {
				return found, err
			}
			continue
		}
		if opt.context > 0 {
			if len(before) == opt.context {
				before = append(before[:0], before[1:]...)
			}
			before = append(before, wire.Match{Path: p, Line: n, Text: line, Context: true})
		}
	}
	// A line longer than the scanner's buffer ends the file's search quietly:
	// such a file is data, not text.
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return found, err
	}
	return found, nil
}
