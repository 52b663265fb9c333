// Package httpchunk holds what the proxy's and the load generator's
// chunked-body readers share: the chunk-size line's grammar (RFC 9112 §7.1).
package httpchunk

import "bytes"

// ParseSize reads the hex size of a chunk-size line, ignoring its line
// ending, trailing whitespace and chunk extensions (";name=value"). ok is
// false for a line that is no chunk size, or one too big for an int64.
func ParseSize(line []byte) (size int64, ok bool) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			size = size<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			size = size<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			size = size<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return size, true
}
