package record

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// stutter is a file that fails: each write first takes at most part[i]
// bytes (all when negative) and fails when fail[i], then, past the lists,
// takes everything.
type stutter struct {
	out  bytes.Buffer
	part []int
	fail []bool
	i    int
}

func (s *stutter) Write(p []byte) (int, error) {
	i := s.i
	s.i++
	if i >= len(s.part) {
		return s.out.Write(p)
	}
	n := len(p)
	if s.part[i] >= 0 {
		n = min(n, s.part[i])
	}
	s.out.Write(p[:n])
	if s.fail[i] {
		return n, errors.New("no space left on device")
	}
	return n, nil
}

func testRecord(i int) *Record {
	r := &Record{ID: fmt.Sprintf("req-%d", i), Model: "m", Stream: true, Status: 200, Sent: time.Millisecond}
	r.AddEvent(2*time.Millisecond, 1)
	return r
}

// TestWriterSurvivesFailedWrites: records written while the file fails
// reach it whole and in order once it works again, a line written in part
// included; Written and Held count them on the way.
func TestWriterSurvivesFailedWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		part []int
		fail []bool
	}{
		{"nothing written, then room", []int{0, 0}, []bool{true, true}},
		{"half a line, then room", []int{30, 0}, []bool{true, true}},
		{"a line and a half, then room", []int{150, 7}, []bool{true, true}},
		{"short write without an error", []int{40}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &stutter{part: tc.part, fail: tc.fail}
			w := NewWriter(f)
			var want bytes.Buffer
			ref := NewWriter(&want)
			for i := range 5 {
				if err := w.Write(testRecord(i)); err != nil {
					t.Fatalf("Write %d: %v", i, err)
				}
				_ = ref.Write(testRecord(i))
				if i < len(tc.part) {
					if err := w.Flush(); err == nil {
						t.Fatalf("flush %d: no error from a failing file", i)
					}
					if w.Held() == 0 {
						t.Fatalf("flush %d failed but nothing is held", i)
					}
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatalf("the last flush: %v", err)
			}
			_ = ref.Flush()
			if f.out.String() != want.String() {
				t.Fatalf("the file holds\n%s\nwant\n%s", f.out.String(), want.String())
			}
			if w.Written() != 5 || w.Held() != 0 {
				t.Fatalf("Written %d Held %d, want 5 and 0", w.Written(), w.Held())
			}
			rd := NewReader(strings.NewReader(f.out.String()))
			for i := range 5 {
				var r Record
				if err := rd.Read(&r); err != nil || r.ID != fmt.Sprintf("req-%d", i) {
					t.Fatalf("line %d: %v %q", i, err, r.ID)
				}
			}
		})
	}
}

// TestWriterBoundsWhatWaits: past MaxHeld bytes waiting for a file that
// fails, a record is refused with the file's reason, and nothing held is
// lost for it.
func TestWriterBoundsWhatWaits(t *testing.T) {
	f := &stutter{part: []int{0}, fail: []bool{true}}
	f.part = append(f.part, make([]int, 1000)...)
	for range 1000 {
		f.fail = append(f.fail, true)
	}
	f.fail = append(f.fail, true)
	w := NewWriter(f)
	big := testRecord(0)
	big.Request = []byte(`{"prompt":"` + strings.Repeat("x", 1<<20) + `"}`)
	var refused error
	kept := 0
	for i := range 40 {
		big.ID = fmt.Sprint("big-", i)
		if err := w.Write(big); err != nil {
			refused = err
			break
		}
		kept++
		_ = w.Flush()
	}
	if refused == nil || !errors.Is(refused, ErrHeldFull) || !strings.Contains(refused.Error(), "no space left") {
		t.Fatalf("Write past MaxHeld = %v, want ErrHeldFull with the file's reason", refused)
	}
	if kept < MaxHeld>>20 || w.Held() != kept {
		t.Fatalf("kept %d records of 1 MiB, held %d; want at least %d held", kept, w.Held(), MaxHeld>>20)
	}
}
