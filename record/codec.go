package record

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// wire is the JSON form of a Record. Event arrivals are stored compactly as
// base64 of unsigned varints: the first is the arrival of the first event
// after Sent, each next one the gap from the previous event, in nanoseconds.
// A 5 ms gap costs 3 bytes before base64, so a 8,192-token stream is ~32 KiB.
type wire struct {
	V                int       `json:"v"`
	ID               string    `json:"id,omitempty"`
	ResponseID       string    `json:"response_id,omitempty"`
	Tag              string    `json:"tag,omitempty"`
	Model            string    `json:"model,omitempty"`
	API              API       `json:"api,omitempty"`
	Wall             time.Time `json:"wall"`
	Stream           bool      `json:"stream"`
	MaxTokens        int       `json:"max_tokens,omitempty"`
	SentNS           int64     `json:"sent_ns"`
	FirstNS          *int64    `json:"first_ns,omitempty"`
	EndNS            int64     `json:"end_ns"`
	Status           int       `json:"status,omitempty"`
	Outcome          Outcome   `json:"outcome"`
	Blame            Blame     `json:"blame,omitempty"`
	Error            string    `json:"error,omitempty"`
	Retries          int       `json:"retries,omitempty"`
	PromptTokens     int       `json:"prompt_tokens"`
	PromptSource     Source    `json:"prompt_source,omitempty"`
	CompletionTokens int       `json:"completion_tokens"`
	CompletionSource Source    `json:"completion_source,omitempty"`
	CachedTokens     int       `json:"cached_tokens,omitempty"`
	CachedSource     Source    `json:"cached_source,omitempty"`
	EnginePrefillNS  *int64    `json:"engine_prefill_ns,omitempty"`
	Events           int       `json:"events"`
	Arrivals         string    `json:"arrivals,omitempty"` // see wire
	Tokens           string    `json:"tokens,omitempty"`   // base64 uvarints, one per event; absent when all are 1
	Request          string    `json:"request,omitempty"`  // request body, only with --capture-prompts
}

// MarshalJSON encodes r in the versioned wire form.
func (r Record) MarshalJSON() ([]byte, error) {
	w := wire{
		V: SchemaVersion, ID: r.ID, ResponseID: r.ResponseID, Tag: r.Tag, Model: r.Model, API: r.API, Wall: r.Wall,
		Stream: r.Stream, MaxTokens: r.MaxTokens,
		SentNS: int64(r.Sent), EndNS: int64(r.End),
		Status: r.Status, Outcome: r.Outcome, Blame: r.Blame, Error: r.Error, Retries: r.Retries,
		PromptTokens: r.PromptTokens, PromptSource: r.PromptSource,
		CompletionTokens: r.CompletionTokens, CompletionSource: r.CompletionSource,
		CachedTokens: r.CachedTokens, CachedSource: r.CachedSource, Events: len(r.Arrivals),
	}
	if r.EnginePrefillSet {
		ns := int64(r.EnginePrefill)
		w.EnginePrefillNS = &ns
	}
	if len(r.Arrivals) > 0 {
		var first int64
		buf := make([]byte, 0, 3*len(r.Arrivals))
		prev := r.Sent
		for _, a := range r.Arrivals {
			// Arrivals never go back where they are taken (AddEvent); a
			// record built by other means is written all the same, an
			// arrival before the one before it at that one's time: a
			// record is never refused.
			a = max(a, prev)
			buf = binary.AppendUvarint(buf, uint64(a-prev))
			prev = a
		}
		first = max(int64(r.Arrivals[0]), int64(r.Sent))
		w.FirstNS = &first
		w.Arrivals = base64.RawStdEncoding.EncodeToString(buf)
	}
	if r.Tokens != nil {
		// One count per event: AddEvent keeps them parallel; a record
		// built by other means with too few counts has its missing events
		// at one token each, and extra counts are dropped.
		buf := make([]byte, 0, len(r.Arrivals))
		for i := range r.Arrivals {
			t := int32(1)
			if i < len(r.Tokens) && r.Tokens[i] > 0 {
				t = r.Tokens[i]
			}
			buf = binary.AppendUvarint(buf, uint64(t))
		}
		w.Tokens = base64.RawStdEncoding.EncodeToString(buf)
	}
	if r.Request != nil {
		w.Request = string(r.Request)
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes the wire form, refusing a newer schema.
func (r *Record) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.V < 1 || w.V > SchemaVersion {
		return fmt.Errorf("record schema v%d; this tokentap reads v1 to v%d (upgrade tokentap)", w.V, SchemaVersion)
	}
	*r = Record{
		ID: w.ID, ResponseID: w.ResponseID, Tag: w.Tag, Model: w.Model, API: w.API, Wall: w.Wall,
		Stream: w.Stream, MaxTokens: w.MaxTokens,
		Sent: time.Duration(w.SentNS), End: time.Duration(w.EndNS),
		Status: w.Status, Outcome: w.Outcome, Blame: w.Blame, Error: w.Error, Retries: w.Retries,
		PromptTokens: w.PromptTokens, PromptSource: w.PromptSource,
		CompletionTokens: w.CompletionTokens, CompletionSource: w.CompletionSource,
		CachedTokens: w.CachedTokens, CachedSource: w.CachedSource,
	}
	if w.EnginePrefillNS != nil && *w.EnginePrefillNS >= 0 {
		r.EnginePrefill, r.EnginePrefillSet = time.Duration(*w.EnginePrefillNS), true
	}
	if w.Request != "" {
		r.Request = []byte(w.Request)
	}
	if w.Events == 0 {
		return nil
	}
	raw, err := base64.RawStdEncoding.DecodeString(w.Arrivals)
	if err != nil {
		return fmt.Errorf("record %s: arrivals: %w", w.ID, err)
	}
	if w.Events < 0 || w.Events > len(raw) {
		return fmt.Errorf("record %s: %d events cannot be stored in %d bytes of arrivals", w.ID, w.Events, len(raw))
	}
	r.Arrivals = make([]time.Duration, 0, w.Events)
	at := r.Sent
	for len(raw) > 0 {
		d, n := binary.Uvarint(raw)
		if n <= 0 || d > 1<<62 || (at > 0 && time.Duration(d) > math.MaxInt64-at) {
			return fmt.Errorf("record %s: arrivals: bad varint", w.ID)
		}
		raw = raw[n:]
		at += time.Duration(d)
		r.Arrivals = append(r.Arrivals, at)
	}
	if len(r.Arrivals) != w.Events {
		return fmt.Errorf("record %s: %d arrivals for %d events", w.ID, len(r.Arrivals), w.Events)
	}
	if w.FirstNS != nil && time.Duration(*w.FirstNS) != r.Arrivals[0] {
		return fmt.Errorf("record %s: first_ns disagrees with the first arrival", w.ID)
	}
	r.First = r.Arrivals[0]
	if w.Tokens != "" {
		raw, err := base64.RawStdEncoding.DecodeString(w.Tokens)
		if err != nil {
			return fmt.Errorf("record %s: tokens: %w", w.ID, err)
		}
		r.Tokens = make([]int32, 0, w.Events)
		for len(raw) > 0 {
			t, n := binary.Uvarint(raw)
			if n <= 0 || t > 1<<30 {
				return fmt.Errorf("record %s: tokens: bad varint", w.ID)
			}
			raw = raw[n:]
			r.Tokens = append(r.Tokens, int32(t))
		}
		if len(r.Tokens) != w.Events {
			return fmt.Errorf("record %s: %d token counts for %d events", w.ID, len(r.Tokens), w.Events)
		}
	}
	return nil
}

// MaxLine is the longest JSONL line a Reader accepts (a record with a
// captured 248K-token prompt is a few MiB).
const MaxLine = 64 << 20

// Reader reads JSON-lines records.
type Reader struct {
	br   *bufio.Reader
	line int
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{br: bufio.NewReaderSize(r, 256<<10)} }

// Read decodes the next record into rec. It returns io.EOF after the last
// one; an error names the line it happened on. Blank lines are skipped.
func (rd *Reader) Read(rec *Record) error {
	for {
		b, err := rd.readLine()
		if len(b) == 0 && err != nil {
			return err
		}
		rd.line++
		if len(trimSpace(b)) == 0 {
			if err != nil {
				return err
			}
			continue
		}
		if uerr := rec.UnmarshalJSON(b); uerr != nil {
			if err != nil { // the input ended inside this line
				return fmt.Errorf("line %d: %w", rd.line, ErrTornLine)
			}
			return fmt.Errorf("line %d: %w", rd.line, uerr)
		}
		return nil
	}
}

// ErrTornLine is Read's error for a last line that ends without a newline
// and is not a whole record: its writer stopped mid-write (a proxy killed
// while writing its capture). The records before it are whole; callers
// may keep them and say that the torn line was skipped.
var ErrTornLine = errors.New("the last line was cut off mid-write (no newline, not a whole record)")

func (rd *Reader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLine {
			return nil, fmt.Errorf("line %d: longer than %d bytes", rd.line+1, MaxLine)
		}
		if err == nil {
			if line == nil {
				return chunk, nil
			}
			return append(line, chunk...), nil
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

// ReadAll reads every record from r. On a torn last line (ErrTornLine) it
// returns every record before it with the error.
func ReadAll(r io.Reader) ([]Record, error) {
	rd := NewReader(r)
	var out []Record
	for {
		var rec Record
		err := rd.Read(&rec)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}
