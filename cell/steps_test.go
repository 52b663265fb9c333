package cell

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tokentap/tokentap/record"
)

// bruteDecoding counts, at instant t, the intervals [from, to) open.
func bruteDecoding(iv [][2]time.Duration, t time.Duration) int {
	n := 0
	for _, v := range iv {
		if v[0] <= t && t < v[1] {
			n++
		}
	}
	return n
}

// at reads a step function at instant t.
func (s Steps) at(t time.Duration) int {
	n := 0
	for _, st := range s {
		if st.At > t {
			break
		}
		n = st.N
	}
	return n
}

func randomIntervals(r *rand.Rand, k int) [][2]time.Duration {
	iv := make([][2]time.Duration, k)
	for i := range iv {
		// Coarse instants, so starts and ends often coincide.
		a := time.Duration(r.IntN(50)) * time.Millisecond
		iv[i] = [2]time.Duration{a, a + time.Duration(1+r.IntN(20))*time.Millisecond}
	}
	return iv
}

func stepsOf(iv [][2]time.Duration) Steps {
	var e []edge
	for _, v := range iv {
		e = append(e, edge{v[0], +1}, edge{v[1], -1})
	}
	return steps(e)
}

// TestStepsAndSum: a step function read at any instant is the number of
// intervals open then, and the sum of several parts' step functions is the
// step function of all their intervals together: the peak over shards is
// exact, where adding each shard's peak is not.
func TestStepsAndSum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		var all [][2]time.Duration
		var parts []Steps
		peaks := 0
		for range 1 + r.IntN(4) {
			iv := randomIntervals(r, r.IntN(12))
			all = append(all, iv...)
			s := stepsOf(iv)
			parts = append(parts, s)
			peaks += s.Peak()
			for ms := -1; ms < 80; ms++ {
				at := time.Duration(ms) * time.Millisecond
				if got, want := s.at(at), bruteDecoding(iv, at); got != want {
					t.Fatalf("trial %d: %d decoding at %s, want %d", trial, got, at, want)
				}
			}
		}
		sum := Sum(parts...)
		whole := stepsOf(all)
		if !slices.Equal(sum, whole) {
			t.Fatalf("trial %d: sum of parts %v, all together %v", trial, sum, whole)
		}
		top := 0
		for ms := 0; ms < 80; ms++ {
			top = max(top, bruteDecoding(all, time.Duration(ms)*time.Millisecond))
		}
		if sum.Peak() != top || top > peaks {
			t.Fatalf("trial %d: peak %d, brute force %d, parts' peaks add to %d", trial, sum.Peak(), top, peaks)
		}
	}
	// Two shards, each with all its requests decoding at some instant but
	// never at the same one: adding their peaks says 4, together 2 decode.
	a := stepsOf([][2]time.Duration{{0, 10}, {0, 10}})
	b := stepsOf([][2]time.Duration{{10, 20}, {10, 20}})
	if a.Peak()+b.Peak() != 4 || Sum(a, b).Peak() != 2 {
		t.Errorf("peaks %d + %d, together %d; want 2 + 2 and 2", a.Peak(), b.Peak(), Sum(a, b).Peak())
	}
}

func TestStepsEncodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		s := stepsOf(randomIntervals(r, r.IntN(30)))
		origin := time.Duration(r.Int64N(int64(time.Hour))) - 30*time.Minute
		got, err := DecodeSteps(s.Encode(origin), origin)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, s) && !(len(got) == 0 && len(s) == 0) {
			t.Fatalf("round trip: %v, want %v", got, s)
		}
		// Another origin shifts every step by the difference.
		moved, err := DecodeSteps(s.Encode(origin), origin+time.Second)
		if err != nil || !slices.Equal(moved, s.Shift(time.Second)) && len(s) > 0 {
			t.Fatalf("shifted: %v, %v; want %v", moved, err, s.Shift(time.Second))
		}
	}
	for _, bad := range []string{"!!", "AQ", "AQIB", "gICAgICAgICAgAE"} {
		if _, err := DecodeSteps(bad, 0); err == nil {
			t.Errorf("DecodeSteps(%q) accepted it", bad)
		}
	}
}

func FuzzDecodeSteps(f *testing.F) {
	f.Add(stepsOf([][2]time.Duration{{0, 10}, {5, 20}}).Encode(0))
	f.Add("")
	f.Add("AQIB")
	f.Fuzz(func(t *testing.T, v string) {
		s, err := DecodeSteps(v, 0)
		if err != nil {
			return
		}
		for i := 1; i < len(s); i++ {
			if s[i].At <= s[i-1].At {
				t.Fatalf("decoded steps go backwards: %v", s)
			}
		}
		back, err := DecodeSteps(s.Encode(0), 0)
		if err != nil || !slices.Equal(back, s) && len(s) > 0 {
			t.Fatalf("re-encoding %v gave %v, %v", s, back, err)
		}
		_ = Sum(s, s).Peak()
	})
}

// TestDecodeAll: one part is Decode; parts sharing one window are Decode of
// all their records; parts with their own windows judge each record against
// its own part's window, and add up their rates.
func TestDecodeAll(t *testing.T) {
	recs := []record.Record{recBefore, recInside, recRunning}
	one := Decode(recs, w10)
	all := DecodeAll([]Part{{Records: recs, Window: w10}})
	if !figuresEqual(one, all) {
		t.Errorf("DecodeAll of one part %+v, Decode %+v", all, one)
	}
	split := DecodeAll([]Part{{Records: recs[:1], Window: w10}, {Records: recs[1:], Window: w10}})
	if !figuresEqual(one, split) {
		t.Errorf("two parts of one window %+v, Decode of all %+v", split, one)
	}
	// A second load generator's window opened 1 s later: its request sent
	// at 10.5 s is outside it, and its window's tokens count over its own
	// 10 s.
	late := Window{Start: w10.Start + time.Second, End: w10.End + time.Second}
	a := steady(10500, 10600, 100, 21500, record.Cancelled)
	b := steady(12000, 12100, 100, 21500, record.Cancelled)
	f := DecodeAll([]Part{{Records: []record.Record{a}, Window: w10}, {Records: []record.Record{b}, Window: late}})
	fa, fb := Decode([]record.Record{a}, w10), Decode([]record.Record{b}, late)
	if f.Sent != fa.Sent+fb.Sent || f.OutputTokens != fa.OutputTokens+fb.OutputTokens ||
		!near(f.TotalTokPerSec, fa.TotalTokPerSec+fb.TotalTokPerSec, 1e-9) || !near(f.AvgDecoding, fa.AvgDecoding+fb.AvgDecoding, 1e-9) {
		t.Errorf("two windows: %+v; parts %+v and %+v", f, fa, fb)
	}
	if f.Window != (Window{Start: w10.Start, End: late.End}) || f.MeasuredFor != 10*time.Second {
		t.Errorf("two windows: span %+v measured for %s", f.Window, f.MeasuredFor)
	}
	if f.PeakDecoding != 2 || Sum(fa.Decoding, fb.Decoding).Peak() != 2 {
		t.Errorf("peak %d; both decoded from 12.1 s to 20 s", f.PeakDecoding)
	}
	if f.Hist.TTFT.TotalCount() != fa.Hist.TTFT.TotalCount()+fb.Hist.TTFT.TotalCount() {
		t.Errorf("TTFT values %d, parts %d + %d", f.Hist.TTFT.TotalCount(), fa.Hist.TTFT.TotalCount(), fb.Hist.TTFT.TotalCount())
	}
	if e := DecodeAll([]Part{{Window: Window{Start: 5, End: 5}}}); e.MeasuredFor != 0 || e.OutputTokens != 0 {
		t.Errorf("an empty window measured %+v", e)
	}
}

func figuresEqual(a, b Figures) bool {
	return a.Window == b.Window && a.MeasuredFor == b.MeasuredFor && a.OutputTokens == b.OutputTokens &&
		a.TotalTokPerSec == b.TotalTokPerSec && a.PerRequestTokPerSec == b.PerRequestTokPerSec && a.TTFT == b.TTFT &&
		a.TBT == b.TBT && a.AvgDecoding == b.AvgDecoding && a.PeakDecoding == b.PeakDecoding && a.Completed == b.Completed &&
		a.Sent == b.Sent && a.Failed == b.Failed && a.PromptTokens == b.PromptTokens && slices.Equal(a.Decoding, b.Decoding) &&
		a.Hist.TTFT.Equals(b.Hist.TTFT) && a.Hist.TBT.Equals(b.Hist.TBT) && a.Hist.E2E.Equals(b.Hist.E2E) && a.Hist.Rate.Equals(b.Hist.Rate)
}
