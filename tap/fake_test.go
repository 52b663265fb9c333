package tap

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/record"
)

// TestAgainstFakeEngine streams from the fake engine over HTTP on
// 127.0.0.1 and checks every record against the fake's ledger: token events
// and the tokens each carried, totals, outcome, and that no event was seen
// before the fake wrote it.
func TestAgainstFakeEngine(t *testing.T) {
	m := fixtures.DefaultModel()
	m.Name = "fake"
	m.FirstEventDelay = 5 * time.Millisecond
	m.TBTBase, m.TBTPerRunning, m.TBTPerKTokens = time.Millisecond, 0, 0
	m.PrefillTokPerSec, m.PrefillSlowdown = 1e7, 0
	m.TokensPerEvent = 3 // speculative decoding: several tokens per event
	eng := fixtures.StartTest(t, m)
	one := m
	one.TokensPerEvent = 1
	one.FinishChunk = true
	single := fixtures.StartTest(t, one)

	tests := []struct {
		name       string
		eng        *fixtures.Engine
		api        record.API
		usage      string // stream_options
		fault      string
		outcome    record.Outcome
		perEvent   bool // per-event tokens known (continuous usage or one per event)
		fromUsage  bool
		wantStatus int
	}{
		{"chat continuous usage", eng, record.Chat, `{"include_usage":true,"continuous_usage_stats":true}`, "", record.OK, true, true, 200},
		{"completions continuous usage", eng, record.Completions, `{"include_usage":true,"continuous_usage_stats":true}`, "", record.OK, true, true, 200},
		{"chat final usage only", eng, record.Chat, `{"include_usage":true}`, "", record.OK, false, true, 200},
		{"chat one token per event, finish chunk", single, record.Chat, `{"include_usage":true}`, "", record.OK, true, true, 200},
		{"chat no usage", single, record.Chat, `{"include_usage":false}`, "", record.OK, true, false, 200},
		{"cut", eng, record.Chat, `{"include_usage":true,"continuous_usage_stats":true}`, "cut=20", record.Broken, true, true, 200},
		{"malformed event", single, record.Chat, `{"include_usage":true}`, "malformed@5", record.Malformed, true, true, 200},
		{"http 500", eng, record.Chat, `{"include_usage":true}`, "status=500", record.HTTPError, true, false, 500},
	}
	clock := record.NewClock()
	off := func(at time.Time) time.Duration { return at.Sub(clock.Start()) }
	s := NewStream(clock)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, input := "/v1/chat/completions", `"messages":[{"role":"user","content":"count the tokens of this prompt"}]`
			if tt.api == record.Completions {
				path, input = "/v1/completions", `"prompt":"count the tokens of this prompt"`
			}
			body := fmt.Sprintf(`{"model":"fake",%s,"max_tokens":40,"ignore_eos":true,"stream":true,"stream_options":%s}`, input, tt.usage)
			req, err := http.NewRequest("POST", tt.eng.URL()+path, bytes.NewBufferString(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tt.fault != "" {
				req.Header.Set(fixtures.FaultHeader, tt.fault)
			}
			rec := &record.Record{API: tt.api, Stream: true, Model: "fake", MaxTokens: 40, Sent: clock.Now()}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			s.Begin(rec)
			s.Status(resp.StatusCode)
			s.End(drain(s, resp.Body, 512), "")

			if rec.Outcome != tt.outcome || rec.Status != tt.wantStatus {
				t.Fatalf("outcome %s/%s status %d (%q), want %s %d", rec.Outcome, rec.Blame, rec.Status, rec.Error, tt.outcome, tt.wantStatus)
			}
			if tt.outcome != record.OK && rec.Blame != record.BlameEngine {
				t.Fatalf("blame %q, want engine", rec.Blame)
			}
			var le fixtures.LedgerEntry
			found := false
			for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				for _, e := range tt.eng.Ledger() {
					if e.ID == rec.ResponseID || (rec.ResponseID == "" && e.Fault == tt.fault && tt.fault != "") {
						le, found = e, true
					}
				}
			}
			if !found {
				t.Fatalf("no ledger entry for response id %q", rec.ResponseID)
			}
			if string(le.Outcome) != string(rec.Outcome) {
				t.Fatalf("outcome %s, the fake says %s", rec.Outcome, le.Outcome)
			}
			if rec.Events() != len(le.Events) {
				t.Fatalf("%d token events, the fake wrote %d", rec.Events(), len(le.Events))
			}
			for i, ev := range le.Events {
				if tt.perEvent && rec.EventTokens(i) != ev.Tokens {
					t.Fatalf("event %d carried %d tokens, the fake sent %d (tokens %v)", i, rec.EventTokens(i), ev.Tokens, rec.Tokens)
				}
				if rec.Arrivals[i] < off(ev.At) {
					t.Fatalf("event %d seen %v before the fake wrote it", i, off(ev.At)-rec.Arrivals[i])
				}
			}
			switch {
			case tt.fromUsage && tt.outcome == record.OK:
				if rec.CompletionSource != record.SourceUsage || rec.CompletionTokens != le.CompletionTokens || rec.PromptTokens != le.PromptTokens {
					t.Fatalf("usage: completion %d (%s) prompt %d; the fake: %d, %d", rec.CompletionTokens, rec.CompletionSource, rec.PromptTokens, le.CompletionTokens, le.PromptTokens)
				}
			case tt.outcome == record.OK:
				if rec.CompletionSource != record.SourceCounted || rec.CompletionTokens != le.Tokens() {
					t.Fatalf("counted %d (%s), the fake sent %d", rec.CompletionTokens, rec.CompletionSource, le.Tokens())
				}
			}
			if tt.perEvent && rec.ArrivedTokens() != le.Tokens() {
				t.Fatalf("arrived %d tokens, the fake sent %d", rec.ArrivedTokens(), le.Tokens())
			}
		})
	}
}

// drain feeds body into s read by read, in buf-sized reads, closes it and
// returns the read error that ended it (nil at a clean EOF).
func drain(s *Stream, body io.ReadCloser, bufSize int) error {
	defer body.Close()
	buf := make([]byte, bufSize)
	for {
		n, err := body.Read(buf)
		s.Write(buf[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
