package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tokentap/tokentap/record"
)

// PromptFunc returns a prompt of the given length in tokens (as the engine
// counts them) for request number i of a replay; prompts.Builder.Prompt fits.
type PromptFunc func(ctx context.Context, tokens, i int) (string, error)

// Capture configures an open-loop replay of a proxy capture: every captured
// request is sent again with the same shape (prompt length, max_tokens,
// streaming, API) at its original arrival time divided by Speed, whether or
// not earlier requests have finished, and as it went:
//   - a request its client cancelled is cancelled at the same point: after
//     as many tokens as it received, or, if it received none, after as long
//     as it waited;
//   - a request the engine refused (an HTTP error) is sent as it was: its
//     captured body where the capture kept bodies (proxy
//     --capture-prompts), else its captured model name, neither Target.Model
//     nor a fallback, so an unknown model is refused again.
type Capture struct {
	// Options: Target and Clock are used; each request's max_tokens,
	// streaming and tag are its captured record's, and the capture's own
	// timing ends the loop, not Window, Requests or StopOnFailure.
	// Target.API and Model, when set, override each record's (but a
	// refused request keeps its model).
	Options
	// Listed are the models the target serves; with Target.Model empty a
	// record keeps its model when the target lists it, else gets Fallback.
	Listed   []string
	Fallback string
	// Records is the capture, in any order; their Sent offsets give the
	// arrival times.
	Records []record.Record
	// Speed scales time: 2 replays twice as fast. 0 means 1.
	Speed float64
	// Prompt builds each request's prompt. Required.
	Prompt PromptFunc
	// IgnoreEOS sends "ignore_eos": true so each request produces the
	// captured number of output tokens where the engine allows it.
	IgnoreEOS bool
	// Extra fields go into every request body (sampling parameters).
	Extra map[string]any
}

// servedName is the listed model id for name (name itself, or name:latest
// for a name without a tag, as Ollama answers to both).
func servedName(listed []string, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	for _, id := range listed {
		if id == name {
			return id, true
		}
	}
	if !strings.Contains(name, ":") {
		for _, id := range listed {
			if id == name+":latest" {
				return id, true
			}
		}
	}
	return "", false
}

// Late is how far behind schedule the replay sent its requests.
type Late struct {
	Max    time.Duration
	Median time.Duration
}

// run replays cfg.Records: one record per request sent, in capture order,
// and how late the sends were against the schedule (Result.Late). Prompts
// are built before the first request is sent so building them costs the
// schedule nothing. A cancelled ctx stops sending and cancels what is in
// flight; the records so far are returned with ctx's error (Result.Err).
// A capture that cannot be replayed returns Err and no records.
func (cfg Capture) run(ctx context.Context) Result {
	if cfg.Prompt == nil {
		return Result{Err: errors.New("replay: no prompt builder")}
	}
	if len(cfg.Records) == 0 {
		return Result{Err: errors.New("replay: the capture holds no records")}
	}
	speed := cfg.Speed
	if speed <= 0 {
		speed = 1
	}
	caps := append([]record.Record(nil), cfg.Records...)
	sort.SliceStable(caps, func(i, j int) bool { return caps[i].Sent < caps[j].Sent })

	jobs := make([]openJob, len(caps))
	t0 := caps[0].Sent
	for i := range caps {
		c := &caps[i]
		t := cfg.Target
		if t.API == "" {
			t.API = c.API
		}
		if t.API == "" {
			t.API = record.Chat
		}
		refused := c.Outcome == record.HTTPError
		switch {
		case refused:
			t.Model = c.Model // sent as it was: an unknown model is refused again
		case t.Model == "":
			t.Model = cfg.Fallback
			if id, ok := servedName(cfg.Listed, c.Model); ok {
				t.Model = id
			}
			if t.Model == "" {
				t.Model = c.Model
			}
		}
		// The client's max_tokens, else what the engine wrote; never none:
		// a request sent without one would generate to the model's length.
		maxTokens := c.MaxTokens
		if maxTokens == 0 {
			maxTokens = max(c.CompletionTokens, 1)
		}
		var body Body
		if refused && len(c.Request) > 0 {
			body = Body{Head: c.Request, PromptTokens: c.PromptTokens}
		} else {
			tokens := c.PromptTokens
			if tokens < 1 {
				tokens = 1
			}
			prompt, err := cfg.Prompt(ctx, tokens, i)
			if err != nil {
				return Result{Err: fmt.Errorf("replay: prompt of %d tokens for capture record %d (%s): %w", tokens, i+1, c.ID, err)}
			}
			if body, err = t.Body(Request{Prompt: prompt, MaxTokens: maxTokens, Stream: c.Stream, IgnoreEOS: cfg.IgnoreEOS, Extra: cfg.Extra}); err != nil {
				return Result{Err: err}
			}
			body.PromptTokens = c.PromptTokens
		}
		jobs[i] = openJob{
			at:     time.Duration(float64(c.Sent-t0) / speed),
			target: t,
			body:   body,
			rec:    record.Record{ID: "replay#" + strconv.Itoa(i+1), Tag: c.ID, MaxTokens: maxTokens, Stream: c.Stream},
		}
		if c.Outcome == record.Cancelled {
			if n := c.ArrivedTokens(); n > 0 {
				jobs[i].stopAfter = n
			} else {
				jobs[i].stopIn = max(c.End-c.Sent, time.Millisecond)
			}
		}
	}

	return runOpen(ctx, cfg.Clock, jobs, openOpts{})
}
