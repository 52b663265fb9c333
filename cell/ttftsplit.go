package cell

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/result"
)

// This file is the arithmetic of METHOD.md §7: where a cell's time to first
// token went by the engine's own figures, over the same requests as
// tokentap's.

// EnginePart is the engine's figure of one part of TTFT over a window:
// Total time summed over Requests requests, as the growth of its
// histogram's _sum and _count between two readings. Counter marks a
// counter of time without a count (llama.cpp's prompt_seconds_total
// before b10406): the requests tokentap saw get their first token stand
// in for Requests. FinishedOnly marks a figure the engine keeps only of
// the requests that finished normally (vLLM's queue and prefill times,
// TGI's queue and validation times), never of one aborted.
type EnginePart struct {
	Name         string // result.PartQueue, PartValidation, PartPrefill or PartEngineTTFT
	Total        time.Duration
	Requests     int
	Counter      bool
	FinishedOnly bool
	Source       string
}

// Tolerance bounds what the clocks and the means' arithmetic may put an
// engine figure above the one it is part of (a part above the engine's
// TTFT, the engine's TTFT above tokentap's, for the same requests): 5% and
// 1 ms.
func withinTolerance(part, whole float64) bool { return part <= whole*1.05+1 }

// Split is where the TTFT of the requests sent in window w went, by the
// engine's figures (METHOD.md §7), over one set of requests: the engine's
// figures and tokentap's mean TTFT always describe the same requests, or
// are not shown.
//
//   - Where responses said their own prefill time (llama.cpp's
//     timings.prompt_ms, in the usage of requests that ended), it is
//     averaged over those requests, beside their client TTFT: per request,
//     and preferred to any counter.
//   - Else the engine's parts: those it keeps of every request that got a
//     first token (vLLM's TTFT, SGLang's) are over the window's requests
//     that got one; those it keeps only of requests that finished (vLLM's
//     queue and prefill, TGI's queue and validation) over the window's
//     requests that finished. Where some were cut, the two sets differ:
//     the figures of every request are shown, and the others are not, with
//     the reason (where the engine keeps only the latter, they are shown
//     over the finished requests, beside their client TTFT).
//   - A part whose engine count differs from tokentap's count of the set
//     (other clients' requests on the engine) is not shown, nor a part
//     above the engine's TTFT or an engine TTFT above tokentap's beyond the
//     clocks' tolerance: the figures do not describe the same requests.
//
// Outside the engine is client TTFT − engine TTFT where the engine has a
// TTFT figure; where it has only parts, client TTFT − the parts is
// unaccounted (time outside the engine and inside it that it does not
// report). Nil when no request of the window got a first token, or the
// engine said nothing.
func Split(recs []record.Record, w Window, parts []EnginePart) *result.TTFTSplit {
	type set struct {
		sum time.Duration
		n   int
	}
	var all, fin, timed set
	var timedSum time.Duration
	for i := range recs {
		r := &recs[i]
		if !w.Contains(r.Sent) {
			continue
		}
		ttft, ok := r.TTFT()
		if !ok || ttft < 0 {
			continue
		}
		all.sum += ttft
		all.n++
		if r.Outcome == record.OK {
			fin.sum += ttft
			fin.n++
		}
		if r.EnginePrefillSet {
			timed.sum += ttft
			timed.n++
			timedSum += r.EnginePrefill
		}
	}
	if all.n == 0 {
		return nil
	}
	if timed.n > 0 {
		// Per-response timings: only requests that ended say them.
		s := &result.TTFTSplit{ClientMs: millis(timed.sum) / float64(timed.n), ClientRequests: timed.n, Over: result.OverTimed,
			Prefill: &result.TTFTPart{Ms: millis(timedSum) / float64(timed.n), Requests: timed.n,
				Source: "timings.prompt_ms of each response (llama.cpp), over the window's requests that ended with usage"}}
		if timed.n < all.n {
			s.Note = fmt.Sprintf("Over the %d requests whose responses gave their timings; %d more of the window got a first token but were cut before theirs.", timed.n, all.n-timed.n)
		}
		return s.Finish()
	}
	var everyParts, finParts []EnginePart
	for _, p := range parts {
		switch {
		case p.Name != result.PartQueue && p.Name != result.PartValidation && p.Name != result.PartPrefill && p.Name != result.PartEngineTTFT:
		case p.FinishedOnly:
			finParts = append(finParts, p)
		case p.Counter || p.Requests > 0:
			everyParts = append(everyParts, p)
		}
	}
	if len(everyParts) == 0 && len(finParts) == 0 {
		return nil
	}
	var notes []string
	over, use := all, everyParts
	s := &result.TTFTSplit{Over: result.OverFirstToken}
	switch {
	case fin.n == all.n:
		use = append(use, finParts...)
	case len(everyParts) == 0 && fin.n > 0:
		over, use = fin, finParts
		s.Over = result.OverFinished
		notes = append(notes, fmt.Sprintf("Over the %d requests that finished: the engine keeps its %s only of those, and %d more of the window were cut (--finish-requests lets them finish).",
			fin.n, partList(finParts), all.n-fin.n))
	case len(finParts) > 0:
		notes = append(notes, fmt.Sprintf("No %s: the engine keeps these only of the requests that finished, and %d of the %d requests of the window that got a first token were cut (--finish-requests lets them finish).",
			partList(finParts), all.n-fin.n, all.n))
	}
	s.ClientMs, s.ClientRequests = millis(over.sum)/float64(over.n), over.n
	for _, p := range use {
		n := p.Requests
		if p.Counter {
			n = over.n
		}
		if n != over.n {
			notes = append(notes, fmt.Sprintf("No %s: the engine counted %d requests, tokentap %d (other clients' requests on the engine make them different sets).", partLabel(p.Name), n, over.n))
			continue
		}
		part := &result.TTFTPart{Ms: millis(p.Total) / float64(n), Requests: n, Source: p.Source}
		switch p.Name {
		case result.PartQueue:
			s.Queue = part
		case result.PartValidation:
			s.Validation = part
		case result.PartPrefill:
			s.Prefill = part
		case result.PartEngineTTFT:
			s.EngineTTFT = part
		}
	}
	if e := s.EngineTTFT; e != nil && !withinTolerance(e.Ms, s.ClientMs) {
		notes = append(notes, fmt.Sprintf("No engine TTFT: the engine's %.1f ms is above tokentap's %.1f ms for the same requests, beyond the clocks' tolerance.", e.Ms, s.ClientMs))
		s.EngineTTFT = nil
	}
	if e := s.EngineTTFT; e != nil {
		for _, pp := range []**result.TTFTPart{&s.Queue, &s.Validation, &s.Prefill} {
			if *pp != nil && !withinTolerance((*pp).Ms, e.Ms) {
				notes = append(notes, fmt.Sprintf("A part (%.1f ms) above the engine's TTFT (%.1f ms) is not shown: they cannot be the same requests'.", (*pp).Ms, e.Ms))
				*pp = nil
			}
		}
	}
	s.Note = strings.Join(notes, " ")
	if s.Queue == nil && s.Validation == nil && s.Prefill == nil && s.EngineTTFT == nil && s.Note == "" {
		return nil
	}
	return s.Finish()
}

func partLabel(name string) string {
	switch name {
	case result.PartQueue:
		return "queue time"
	case result.PartValidation:
		return "validation time"
	case result.PartPrefill:
		return "prefill time"
	case result.PartEngineTTFT:
		return "TTFT"
	}
	return name
}

func partList(ps []EnginePart) string {
	var names []string
	for _, p := range ps {
		names = append(names, partLabel(p.Name))
	}
	return english.List(names)
}
