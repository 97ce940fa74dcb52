package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"computerd/core"
	"computerd/wire"
)

// A glob matches a slash-separated path: each segment of the pattern is a
// path.Match pattern and "**" matches any number of segments. A pattern
// without a slash matches the base name only.
type glob struct {
	base string   // the pattern, when it has no slash
	segs []string // the pattern's segments, when it has one
}

// compileGlob checks every segment of pattern, so matching cannot fail.
func compileGlob(pattern string) (*glob, error) {
	if !strings.Contains(pattern, "/") {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, err
		}
		return &glob{base: pattern}, nil
	}
	g := &glob{segs: strings.Split(pattern, "/")}
	for _, seg := range g.segs {
		if seg == "**" {
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// match reports whether p matches. It walks the pattern and the path once,
// going back only to just after the last "**" seen, so its cost is at most
// len(segments) * len(path segments) segment matches, whatever the number
// of "**": every match of the segments after a "**" can start at the
// earliest place the segments before it allow.
func (g *glob) match(p string) bool {
	if g.segs == nil {
		ok, _ := path.Match(g.base, path.Base(p))
		return ok
	}
	pat, segs := g.segs, strings.Split(p, "/")
	i, j := 0, 0
	star, from := -1, 0 // the last "**" seen and the path segment it was tried up to
	for j < len(segs) {
		if i < len(pat) && pat[i] == "**" {
			star, from = i, j
			i++
			continue
		}
		if i < len(pat) {
			if ok, _ := path.Match(pat[i], segs[j]); ok {
				i, j = i+1, j+1
				continue
			}
		}
		if star < 0 {
			return false
		}
		from++ // let the last "**" take one more segment
		i, j = star+1, from
	}
	for i < len(pat) && pat[i] == "**" {
		i++
	}
	return i == len(pat)
}

// globFilter checks ?name= (or the given parameter) and returns a matcher
// on paths relative to root; an empty pattern matches everything.
func globFilter(r *http.Request, param string) (func(rel string) bool, error) {
	pattern := r.URL.Query().Get(param)
	if pattern == "" {
		return func(string) bool { return true }, nil
	}
	g, err := compileGlob(pattern)
	if err != nil {
		return nil, badRequest("%s=%q: bad glob: %v", param, pattern, err)
	}
	return g.match, nil
}

// relTo returns p relative to root ("" when equal).
func relTo(root, p string) string {
	if root == "" {
		return p
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
}

// find lists the paths under ?path= whose name (or relative path, when the
// pattern has a slash) matches ?name=, optionally only ?type=f|d|l,
// streamed as the tree is walked (a JSON array written element by element).
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
	out := newArray(w)
	err = sn.Walk(r.Context(), root, func(p string, st core.Stat) error {
		if err := r.Context().Err(); err != nil {
			return err
		}
		if p == root && st.IsDir() {
			return nil
		}
		switch {
		case typ == "f" && !st.Mode.IsRegular(), typ == "d" && !st.IsDir(), typ == "l" && st.Mode&fs.ModeSymlink == 0:
			return nil
		}
		if match(relTo(root, p)) {
			return out.add(p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return out.end()
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
	opt := grepOptions{re: re, context: int(min(ctxLines, maxContext)), max: int(maxMatches)}
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
		if err := r.Context().Err(); err != nil {
			return err
		}
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

// contextLineMax is the most of a context line grep keeps and sends: a
// longer one is cut there (at a character boundary) and ends with a
// marker saying how much was cut. With at most maxContext lines before a
// match, what grep holds for context is bounded per request (4 MiB),
// whatever the lines' lengths.
const contextLineMax = 4 << 10

// maxContext bounds ?context=.
const maxContext = 1000

// contextText is line as a context line: whole, or cut at contextLineMax.
func contextText(line []byte) string {
	if len(line) <= contextLineMax {
		return string(line)
	}
	cut := contextLineMax
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return fmt.Sprintf("%s [... %d more bytes]", line[:cut], len(line)-cut)
}

// grepFile writes the matches of one file; it returns how many it found.
// budget <= 0 means no limit.
func grepFile(p string, body io.Reader, opt grepOptions, budget int, enc *json.Encoder) (int, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	if head, _ := br.Peek(8 << 10); bytes.IndexByte(head, 0) >= 0 {
		return 0, nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	// before is a ring of the last opt.context lines: the oldest at
	// before[first], len(before) of them.
	before := make([]wire.Match, 0, min(opt.context, 64))
	first := 0
	after := 0 // context lines still owed after a match
	last := 0  // the last line written
	found := 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if opt.re.Match(line) {
			if last > 0 && n-len(before) > last+1 && opt.context > 0 {
				if err := enc.Encode(wire.Match{Path: p, Break: true}); err != nil {
					return found, err
				}
			}
			for k := range before {
				if err := enc.Encode(before[(first+k)%len(before)]); err != nil {
					return found, err
				}
			}
			before, first = before[:0], 0
			if err := enc.Encode(wire.Match{Path: p, Line: n, Text: string(line)}); err != nil {
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
			if err := enc.Encode(wire.Match{Path: p, Line: n, Text: contextText(line), Context: true}); err != nil {
				return found, err
			}
			continue
		}
		if opt.context > 0 {
			m := wire.Match{Path: p, Line: n, Text: contextText(line), Context: true}
			if len(before) < opt.context {
				before = append(before, m)
			} else {
				before[first] = m
				first = (first + 1) % len(before)
			}
		}
	}
	// A line longer than the scanner's buffer ends the file's search quietly:
	// such a file is data, not text.
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return found, err
	}
	return found, nil
}
