package runner

import (
	"bufio"
	"io"
)

// lineReader reads newline-terminated lines of any length.
type lineReader struct{ r *bufio.Reader }

func newLineReader(r io.Reader) *lineReader { return &lineReader{bufio.NewReaderSize(r, 64<<10)} }

// next returns the next whole line without its newline; a partial last
// line is io.EOF.
func (l *lineReader) next() ([]byte, error) {
	line, err := l.r.ReadBytes('\n')
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return line[:len(line)-1], nil
}
