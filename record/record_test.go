package record

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestAddEvent(t *testing.T) {
	tests := []struct {
		name       string
		add        [][2]int // arrival ms, tokens
		wantTokens []int32  // nil: every event one token
		arrived    int
	}{
		{"none", nil, nil, 0},
		{"one token each", [][2]int{{10, 1}, {20, 1}, {30, 0}}, nil, 3},
		{"multi-token later", [][2]int{{10, 1}, {20, 1}, {30, 3}, {40, 1}}, []int32{1, 1, 3, 1}, 6},
		{"multi-token first", [][2]int{{10, 2}, {20, -5}}, []int32{2, 1}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			for _, a := range tt.add {
				r.AddEvent(time.Duration(a[0])*time.Millisecond, a[1])
			}
			if fmt.Sprint(r.Tokens) != fmt.Sprint(tt.wantTokens) || (r.Tokens == nil) != (tt.wantTokens == nil) {
				t.Fatalf("Tokens = %v, want %v", r.Tokens, tt.wantTokens)
			}
			if r.Events() != len(tt.add) || r.ArrivedTokens() != tt.arrived {
				t.Fatalf("events %d arrived %d, want %d %d", r.Events(), r.ArrivedTokens(), len(tt.add), tt.arrived)
			}
			if len(tt.add) > 0 && r.First != time.Duration(tt.add[0][0])*time.Millisecond {
				t.Fatalf("First = %v", r.First)
			}
		})
	}
}

func TestTimings(t *testing.T) {
	r := Record{Sent: 100 * time.Millisecond}
	if _, ok := r.TTFT(); ok {
		t.Fatal("TTFT without events")
	}
	if _, ok := r.Last(); ok {
		t.Fatal("Last without events")
	}
	if _, ok := r.DecodeRate(); ok {
		t.Fatal("DecodeRate without events")
	}
	r.AddEvent(300*time.Millisecond, 1)
	if _, ok := r.DecodeRate(); ok {
		t.Fatal("DecodeRate from one event")
	}
	// 1 + 4 + 5 tokens; tokens after the first event: 9 over 0.5 s.
	r.AddEvent(550*time.Millisecond, 4)
	r.AddEvent(800*time.Millisecond, 5)
	ttft, _ := r.TTFT()
	last, _ := r.Last()
	rate, ok := r.DecodeRate()
	if ttft != 200*time.Millisecond || last != 800*time.Millisecond || !ok || math.Abs(rate-18) > 1e-9 {
		t.Fatalf("ttft %v last %v rate %v", ttft, last, rate)
	}
	// Events at one instant have no rate.
	same := Record{}
	same.AddEvent(time.Second, 1)
	same.AddEvent(time.Second, 1)
	if _, ok := same.DecodeRate(); ok {
		t.Fatal("DecodeRate over a zero span")
	}
}

func TestReset(t *testing.T) {
	r := Record{ID: "x", Outcome: Broken, Request: []byte("{}")}
	for i := 0; i < 100; i++ {
		r.AddEvent(time.Duration(i), 2)
	}
	c := cap(r.Arrivals)
	r.Reset()
	if r.ID != "" || r.Outcome != "" || r.Request != nil || r.Tokens != nil || len(r.Arrivals) != 0 || cap(r.Arrivals) != c {
		t.Fatalf("Reset left %+v (cap %d, want %d)", r, cap(r.Arrivals), c)
	}
}

func TestOutcomeFailed(t *testing.T) {
	for o, want := range map[Outcome]bool{
		OK: false, Cancelled: false, "": false,
		HTTPError: true, Connect: true, Broken: true, Malformed: true, Timeout: true,
	} {
		if o.Failed() != want {
			t.Errorf("%q.Failed() = %v, want %v", o, o.Failed(), want)
		}
	}
}

func TestClock(t *testing.T) {
	start := time.Now()
	c := ClockAt(start)
	d := c.Now()
	if d < 0 || c.Start() != start {
		t.Fatalf("Now %v Start %v", d, c.Start())
	}
	if w := c.Wall(1500 * time.Millisecond); !w.Equal(start.Add(1500*time.Millisecond)) || w.Round(0) != w {
		t.Fatalf("Wall = %v", w)
	}
	if NewClock().Now() < 0 {
		t.Fatal("a new clock runs backwards")
	}
}
