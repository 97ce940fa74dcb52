// Package tartest makes the tar archives that archive/tar will not write,
// for the tests of attach: GNU sparse files, whose few bytes of headers
// stand for files of any size.
package tartest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"
)

// File is a regular file of an archive.
type File struct {
	Name string
	Data []byte
}

// Sparse is a sparse file: Size bytes, Data at the offsets of its keys
// and zeros elsewhere.
type Sparse struct {
	Name string
	Size int64
	Data map[int64][]byte
	// OldGNU writes it as GNU tar does by default (tar -S): type 'S', its
	// map in the header (at most 4 fragments here). Otherwise it is in
	// GNU's PAX format 0.1: an extended header of GNU.sparse.* records.
	OldGNU bool
}

// Archive is a tar of the files, then the sparse file (its header, then
// its data fragments end to end), then the archive's end.
func Archive(files []File, sp Sparse) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.Data)), ModTime: mtime}); err != nil {
			panic(err)
		}
		tw.Write(f.Data)
	}
	tw.Flush() // no end: the sparse file follows
	var offs []int64
	for off := range sp.Data {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	var sparseMap []string
	var data []byte
	for _, off := range offs {
		sparseMap = append(sparseMap, fmt.Sprint(off), fmt.Sprint(len(sp.Data[off])))
		data = append(data, sp.Data[off]...)
	}
	if sp.OldGNU {
		if len(offs) > 4 {
			panic("tartest: an old GNU sparse file of more than 4 fragments")
		}
		h := header(sp.Name, tar.TypeGNUSparse, int64(len(data)))
		copy(h[257:265], "ustar  \x00") // GNU's magic and version
		for i, off := range offs {
			number(h[386+24*i:398+24*i], off)
			number(h[398+24*i:410+24*i], int64(len(sp.Data[off])))
		}
		number(h[483:495], sp.Size)
		buf.Write(checksummed(h))
	} else {
		var recs []byte
		for _, kv := range [][2]string{
			{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"},
			{"GNU.sparse.name", sp.Name}, {"GNU.sparse.size", fmt.Sprint(sp.Size)},
			{"GNU.sparse.numblocks", fmt.Sprint(len(offs))}, {"GNU.sparse.map", strings.Join(sparseMap, ",")},
		} {
			recs = append(recs, paxRecord(kv[0], kv[1])...)
		}
		buf.Write(header("PaxHeaders/"+sp.Name, tar.TypeXHeader, int64(len(recs))))
		buf.Write(padded(recs))
		buf.Write(header(sp.Name, tar.TypeReg, int64(len(data))))
	}
	buf.Write(padded(data))
	buf.Write(make([]byte, 2*blockSize)) // the archive's end
	return buf.Bytes()
}

const blockSize = 512

var mtime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// paxRecord is one PAX record: its length (counting itself), key=value, newline.
func paxRecord(k, v string) []byte {
	n := len(k) + len(v) + 3
	for n != len(fmt.Sprint(n))+len(k)+len(v)+3 {
		n = len(fmt.Sprint(n)) + len(k) + len(v) + 3
	}
	return []byte(fmt.Sprintf("%d %s=%s\n", n, k, v))
}

// header is a ustar header block.
func header(name string, typ byte, size int64) []byte {
	b := make([]byte, blockSize)
	copy(b[0:100], name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], fmt.Sprintf("%011o\x00", mtime.Unix()))
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	return checksummed(b)
}

// number writes v into the numeric field f: in octal if it fits, else in
// GNU's base-256 (the first byte's top bit set, then big-endian).
func number(f []byte, v int64) {
	if s := fmt.Sprintf("%0*o", len(f)-1, v); len(s) < len(f) {
		copy(f, s+"\x00")
		return
	}
	clear(f)
	for i := len(f) - 1; i > 0; i-- {
		f[i] = byte(v)
		v >>= 8
	}
	f[0] = 0x80
}

// checksummed is header block b with its checksum.
func checksummed(b []byte) []byte {
	copy(b[148:156], "        ") // the checksum counts its own field as spaces
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// padded is b with zeros to whole blocks.
func padded(b []byte) []byte {
	return append(b, make([]byte, (blockSize-len(b)%blockSize)%blockSize)...)
}
