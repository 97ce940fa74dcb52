package core

import (
	"fmt"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize takes and FormatSize writes: powers of 1024.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}

// ParseSize reads a byte count such as 1048576, 512M, 2G or 1T (K, M, G
// and T are powers of 1024, in either case, with an optional B or iB).
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)/mult {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M, G or T: %w", s, ErrInvalidArgument)
	}
	return n * mult, nil
}

// FormatSize writes n as ParseSize reads it, in the largest unit that
// divides it (100G, 1536M, 1000).
func FormatSize(n int64) string {
	for _, u := range sizeUnits {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
