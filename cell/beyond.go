package cell

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// This file is the arithmetic of METHOD.md §7 and §8: where a cell's time
// to first token went by the engine's own figures, and the mean context a
// decoding sequence had, which the bandwidth limit reads the KV cache for.

// EnginePart is the engine's figure of one part of TTFT over a window:
// Total time summed over Requests requests, as the growth of its
// histogram's _sum and _count between two readings. Counter marks a
// counter of time without a count (llama.cpp's prompt_seconds_total): the
// requests tokentap saw get their first token stand in for Requests.
type EnginePart struct {
	Name     string // result.PartQueue, PartPrefill or PartEngineTTFT
	Total    time.Duration
	Requests int
	Counter  bool
	Source   string
}

// Split is where the TTFT of the requests sent in window w went, by the
// engine's figures (METHOD.md §7). The client figure is the mean TTFT of
// the requests sent in the window that got a first token, the same
// requests the engine's TTFT histogram counts. With engine parts (its
// metrics over the window), each part is its total over its requests;
// with none, the requests' own engine prefill times (llama.cpp's
// timings.prompt_ms, in the usage of requests that ended) are averaged,
// against the client TTFT of those same requests. Outside the engine is
// client TTFT − engine TTFT where the engine has a TTFT figure; where it
// has only parts, client TTFT − the parts is unaccounted (time outside the
// engine and inside it that it does not report). Nil when no request of
// the window got a first token, or the engine said nothing.
func Split(recs []record.Record, w Window, parts []EnginePart) *result.TTFTSplit {
	var (
		clientSum      time.Duration
		clientN        int
		timedClientSum time.Duration
		timedSum       time.Duration
		timedN         int
	)
	for i := range recs {
		r := &recs[i]
		if !w.Contains(r.Sent) {
			continue
		}
		ttft, ok := r.TTFT()
		if !ok || ttft < 0 {
			continue
		}
		clientSum += ttft
		clientN++
		if r.EnginePrefillSet {
			timedClientSum += ttft
			timedSum += r.EnginePrefill
			timedN++
		}
	}
	if clientN == 0 {
		return nil
	}
	s := &result.TTFTSplit{ClientMs: millis(clientSum) / float64(clientN), ClientRequests: clientN}
	var differ []string
	for _, p := range parts {
		n := p.Requests
		if p.Counter {
			n = clientN
		}
		if n <= 0 {
			continue
		}
		part := &result.TTFTPart{Ms: millis(p.Total) / float64(n), Requests: n, Source: p.Source}
		switch p.Name {
		case result.PartQueue:
			s.Queue = part
		case result.PartPrefill:
			s.Prefill = part
		case result.PartEngineTTFT:
			s.EngineTTFT = part
		default:
			continue
		}
		if !p.Counter && n != clientN {
			differ = append(differ, fmt.Sprintf("%d for its %s", n, partLabel(p.Name)))
		}
	}
	if s.Queue == nil && s.Prefill == nil && s.EngineTTFT == nil {
		if timedN == 0 {
			return nil
		}
		// Per-response timings: only requests that ended say them.
		s.ClientMs, s.ClientRequests = millis(timedClientSum)/float64(timedN), timedN
		s.Prefill = &result.TTFTPart{Ms: millis(timedSum) / float64(timedN), Requests: timedN,
			Source: "timings.prompt_ms of each response (llama.cpp), over the window's requests that ended with usage"}
	}
	switch {
	case s.EngineTTFT != nil:
		d := s.ClientMs - s.EngineTTFT.Ms
		s.OutsideMs = &d
	default:
		d := s.ClientMs
		if s.Queue != nil {
			d -= s.Queue.Ms
		}
		if s.Prefill != nil {
			d -= s.Prefill.Ms
		}
		s.UnaccountedMs = &d
	}
	if len(differ) > 0 {
		s.Note = fmt.Sprintf("The engine counted %s; tokentap measured %d requests of the window: other clients' requests, or ones the engine observed only at their end, make the means cover different requests.",
			english.List(differ), clientN)
	}
	return s
}

func partLabel(name string) string {
	switch name {
	case result.PartQueue:
		return "queue time"
	case result.PartPrefill:
		return "prefill time"
	case result.PartEngineTTFT:
		return "TTFT"
	}
	return name
}

// MeanSeqTokens is the mean context of a sequence at the decode steps
// inside window w (METHOD.md §8): over every token that arrived in the
// window, its request's prompt tokens plus the tokens it had output
// before it. A request that reports no prompt count (cut before its
// usage, with none set by the load generator) counts prompt tokens. 0
// when no token arrived in the window.
func MeanSeqTokens(recs []record.Record, w Window, prompt int) float64 {
	var sum float64
	var n int64
	for i := range recs {
		r := &recs[i]
		lo, _ := slices.BinarySearch(r.Arrivals, w.Start)
		hi, _ := slices.BinarySearch(r.Arrivals, w.End)
		if lo >= hi {
			continue
		}
		p := r.PromptTokens
		if p <= 0 {
			p = prompt
		}
		before := 0
		for j := 0; j < lo; j++ {
			before += eventTokens(r, j)
		}
		for j := lo; j < hi; j++ {
			k := eventTokens(r, j)
			// Tokens at positions before, before+1, …, before+k-1.
			sum += float64(k)*float64(p+before) + float64(k*(k-1))/2
			n += int64(k)
			before += k
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
