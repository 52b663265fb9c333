package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Writer writes records as JSON lines. It is not safe for concurrent use;
// wrap it (or give each goroutine its own) when several producers share a file.
//
// A write that fails does not end the Writer, as it would a bufio.Writer:
// the lines not yet written, whole or in part, stay in order and go first
// at the next Flush, so a capture that met a full disk goes on, intact,
// once there is room again. What waits is bounded (MaxHeld): a record that
// would take more is refused, and the caller counts it lost.
type Writer struct {
	w       io.Writer
	buf     bytes.Buffer
	ends    []int // where each record's line ends in buf, in order
	enc     *json.Encoder
	written uint64 // records written whole
	err     error  // the last write's failure, nil once one succeeds
}

// MaxHeld is how many bytes of lines a Writer keeps while its writer fails.
const MaxHeld = 16 << 20

// flushAt is how many buffered bytes make Write flush.
const flushAt = 64 << 10

// NewWriter returns a Writer on w. Call Flush when done.
func NewWriter(w io.Writer) *Writer {
	x := &Writer{w: w}
	x.enc = json.NewEncoder(&x.buf)
	x.enc.SetEscapeHTML(false)
	return x
}

// ErrHeldFull is wrapped by Write's error for a record refused because
// MaxHeld bytes already wait for a writer that fails.
var ErrHeldFull = fmt.Errorf("record: %d MiB of lines already wait for the file", MaxHeld>>20)

// Write appends one record as a line. It fails only for a record it does
// not keep: one that cannot be encoded, or one that finds MaxHeld bytes
// waiting for a writer that fails (the error says why the writer fails).
// A failed flush of what was written before is Flush's to report.
func (w *Writer) Write(r *Record) error {
	if w.err != nil && w.buf.Len() >= MaxHeld {
		return fmt.Errorf("%w, which fails: %v", ErrHeldFull, w.err)
	}
	n := w.buf.Len()
	if err := w.enc.Encode(r); err != nil {
		w.buf.Truncate(n)
		return err
	}
	w.ends = append(w.ends, w.buf.Len())
	if w.buf.Len() >= flushAt && w.err == nil {
		_ = w.Flush()
	}
	return nil
}

// Flush writes the waiting lines to the writer. On a failure the lines it
// did not write, and the part of one it wrote in part, wait for the next
// Flush.
func (w *Writer) Flush() error {
	if w.buf.Len() == 0 {
		return nil
	}
	n, err := w.w.Write(w.buf.Bytes())
	if err == nil && n < w.buf.Len() {
		err = io.ErrShortWrite
	}
	w.buf.Next(n)
	whole := 0
	for whole < len(w.ends) && w.ends[whole] <= n {
		whole++
	}
	w.written += uint64(whole)
	w.ends = append(w.ends[:0], w.ends[whole:]...)
	for i := range w.ends {
		w.ends[i] -= n
	}
	if w.buf.Len() == 0 {
		w.buf.Reset() // reuse the buffer from its start
	}
	w.err = err
	return err
}

// Written returns how many records the writer took whole.
func (w *Writer) Written() uint64 { return w.written }

// Held returns how many records wait to be written (whole, or the rest of
// one written in part).
func (w *Writer) Held() int { return len(w.ends) }
