package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tokentap/tokentap/cmd/tokentap/internal/outfile"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/prompts"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/traffic"
)

type replayFlags struct {
	Target      string        `env:"TARGET"`
	Model       string        `env:"MODEL"`
	APIKey      string        `env:"API_KEY"`
	API         string        `env:"API"`
	Speed       float64       `env:"SPEED" envDefault:"1"`
	Out         string        `env:"OUT"`
	Records     string        `env:"RECORDS"`
	Format      string        `env:"FORMAT" envDefault:"text"`
	Percentiles string        `env:"PERCENTILES" envDefault:"50,90,99"`
	AllowFailed bool          `env:"ALLOW_FAILED"`
	Overwrite   bool          `env:"OVERWRITE"`
	Salt        string        `env:"SALT"`
	IdleTimeout time.Duration `env:"IDLE_TIMEOUT" envDefault:"10m"`
	SLO         string        `env:"SLO"`
	LogFlags
}

const replaySummary = `Replay a proxy capture (JSONL records, e.g. from tokentap proxy --capture) against an
engine: every request is sent again with the same shape (prompt length, max_tokens,
streaming, API) at its original arrival time divided by --speed (open loop), and as it
went: a request its client cancelled is cancelled after as many tokens (or as long a
wait) as in the capture, and a request the engine refused is sent as it was (its
captured body with --capture-prompts, else its captured model). The summary puts the
captured and replayed TTFT, time between tokens, end to end and throughput side by side
with their ratio.

Usage: tokentap replay --target URL [flags] capture.jsonl`

func runReplay(args []string, stdout, stderr io.Writer) int {
	var f replayFlags
	if err := loadEnv(&f); err != nil {
		fmt.Fprintf(stderr, "tokentap replay: %v\n", err)
		return exitUsage
	}
	fs := newCLI("replay", replaySummary, stdout, stderr)
	fs.StringVar(&f.Target, "target", f.Target, "engine base URL, e.g. http://127.0.0.1:8000 (required) [TOKENTAP_TARGET]")
	fs.StringVar(&f.Model, "model", f.Model, "model to request instead of the captured one (refused requests keep theirs); empty: the captured model where the engine lists it, else the engine's first [TOKENTAP_MODEL]")
	// The key from the environment is not the flag's default: --help would print it.
	apiKey := fs.String("api-key", "", "API key sent as a Bearer token; never logged or stored [TOKENTAP_API_KEY]")
	fs.StringVar(&f.API, "api", f.API, "send every request to this API (chat or completions) instead of the captured one [TOKENTAP_API]")
	fs.Float64Var(&f.Speed, "speed", f.Speed, "time scale: 2 replays the capture twice as fast [TOKENTAP_SPEED]")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", f.IdleTimeout, "give a request up when the engine sends no byte for this long, e.g. a hung engine (0: never) [TOKENTAP_IDLE_TIMEOUT]")
	fs.StringVar(&f.Out, "out", f.Out, "write the summary here as JSON; an existing file is kept unless --overwrite [TOKENTAP_OUT]")
	fs.StringVar(&f.Records, "records", f.Records, "write the replayed requests' records here (JSONL); an existing file is kept unless --overwrite [TOKENTAP_RECORDS]")
	fs.BoolVar(&f.Overwrite, "overwrite", f.Overwrite, "let --out and --records replace existing files (never the capture) [TOKENTAP_OVERWRITE]")
	fs.StringVar(&f.Format, "format", f.Format, "summary format on stdout: text or json [TOKENTAP_FORMAT]")
	fs.StringVar(&f.Percentiles, "percentiles", f.Percentiles, "percentiles the summary shows, e.g. 50,90,99,99.9 [TOKENTAP_PERCENTILES]")
	fs.BoolVar(&f.AllowFailed, "allow-failed", f.AllowFailed, "exit 0 even when more requests failed than in the capture (default: exit 3) [TOKENTAP_ALLOW_FAILED]")
	fs.StringVar(&f.Salt, "salt", f.Salt, "prompt salt (default: random per run) [TOKENTAP_SALT]")
	fs.StringVar(&f.SLO, "slo", f.SLO, sloHelp)
	f.LogFlags.register(fs)
	// Accept the capture file before or after the flags.
	files, code, done := fs.parseArgs(args)
	if done {
		return code
	}
	if *apiKey != "" {
		f.APIKey = *apiKey
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "tokentap replay: "+format+"\n", a...)
		return code
	}
	if len(files) != 1 {
		return fail(exitUsage, "want exactly one capture file, got %d (usage: tokentap replay --target URL capture.jsonl)", len(files))
	}
	if f.Target == "" {
		return fail(exitUsage, "--target is required (the engine to replay the capture against)")
	}
	var err error
	if f.Target, err = targetURL(f.Target, fs.source("target")); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if f.Speed <= 0 {
		return fail(exitUsage, "%s %v: want a positive factor", fs.source("speed"), f.Speed)
	}
	if f.Format != "text" && f.Format != "json" {
		return fail(exitUsage, "%s %q: use text or json", fs.source("format"), f.Format)
	}
	percentiles, err := result.ParsePercentiles(f.Percentiles)
	if err != nil {
		return fail(exitUsage, "%s %v", fs.source("percentiles"), err)
	}
	if err := checkIdleTimeout(f.IdleTimeout, fs.source("idle-timeout")); err != nil {
		return fail(exitUsage, "%v", err)
	}
	var api record.API
	switch f.API {
	case "":
	case string(record.Chat), string(record.Completions):
		api = record.API(f.API)
	default:
		return fail(exitUsage, "%s %q: use chat or completions", fs.source("api"), f.API)
	}
	if err := distinct(f.Out, fs.source("out"), f.Records, fs.source("records")); err != nil {
		return fail(exitUsage, "%v", err)
	}
	var outT, recT outfile.Target
	for _, o := range []struct {
		path, flag string
		t          *outfile.Target
	}{{f.Out, "out", &outT}, {f.Records, "records", &recT}} {
		if o.path != "" {
			if *o.t, err = output(o.path, fs.source(o.flag), f.Overwrite, files[0]); err != nil {
				return fail(exitUsage, "%v", err)
			}
		}
	}
	objectives, err := parseSLO(f.SLO)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap replay: %v\n", err)
		return exitUsage
	}
	log, err := f.logger(stderr)
	if err != nil {
		return fail(exitUsage, "%s: %v", fs.source("log-level"), err)
	}

	cf, err := os.Open(files[0])
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	capture, err := record.ReadAll(cf)
	cf.Close()
	if errors.Is(err, record.ErrTornLine) && len(capture) > 0 {
		fmt.Fprintf(stderr, "tokentap replay: %s: skipped 1 torn last line (the proxy stopped mid-write); replaying the %d whole records\n", files[0], len(capture))
		err = nil
	}
	if err != nil {
		if _, rerr := result.ReadFile(files[0]); rerr == nil {
			return fail(exitUsage, "%s is a result document (tokentap matrix --out), not a capture: replay takes the JSONL file tokentap proxy --capture writes; render a result with tokentap report %s", files[0], files[0])
		}
		return fail(exitUsage, "reading %s: %v (a capture is the JSONL file tokentap proxy --capture writes)", files[0], err)
	}
	if len(capture) == 0 {
		return fail(exitUsage, "%s holds no records", files[0])
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()

	info, err := engines.Probe(ctx, engines.Target{BaseURL: f.Target, APIKey: f.APIKey, Model: f.Model})
	if err != nil {
		if ctx.Err() != nil {
			return fail(exitInterrupted, "interrupted before any request was sent")
		}
		if errors.Is(err, engines.ErrModel) {
			return fail(exitUsage, "%v", err) // --model names a model the engine does not serve
		}
		return fail(exitEngine, "%v", err)
	}
	// The captured model may not exist on this engine: each request keeps
	// its model where the engine lists it, else gets the engine's first
	// (or --model for all).
	tgt := replay.Target{BaseURL: f.Target, APIKey: f.APIKey, Model: f.Model, API: api, IdleTimeout: idleTimeout(f.IdleTimeout)}
	salt := f.Salt
	if salt == "" {
		salt = prompts.NewSalt()
	}
	builders := map[record.API]*prompts.Builder{}
	prompt := func(ctx context.Context, tokens, i int) (string, error) {
		a := api
		if a == "" {
			a = capture[i].API
		}
		if a == "" {
			a = record.Chat
		}
		b := builders[a]
		if b == nil {
			b = prompts.NewBuilder(salt, info)
			b.API = string(a)
			builders[a] = b
		}
		p, err := b.Prompt(ctx, tokens, i)
		return p.Text, err
	}
	log.Info().Int("requests", len(capture)).Float64("speed", f.Speed).Str("engine", info.Kind).Msg("replay: starting")
	fmt.Fprintf(stderr, "tokentap replay: %d requests from %s against %s (%s) at %gx speed\n", len(capture), files[0], info.BaseURL, info.Kind, f.Speed)

	refusedBlind := 0
	for i := range capture {
		if capture[i].Outcome == record.HTTPError && len(capture[i].Request) == 0 {
			refusedBlind++
		}
	}
	if refusedBlind > 0 {
		what := fmt.Sprintf("%d refused requests were captured without their bodies", refusedBlind)
		if refusedBlind == 1 {
			what = "1 refused request was captured without its body"
		}
		fmt.Fprintf(stderr, "tokentap replay: %s (proxy --capture-prompts keeps them): each is sent as a new 1-token request to its model, which the engine may not refuse\n", what)
	}

	clock := record.NewClock()
	run := replay.Run(ctx, replay.Capture{Options: replay.Options{Target: tgt, Clock: clock}, Listed: info.Models, Fallback: info.Model, Records: capture, Speed: f.Speed, Prompt: prompt, IgnoreEOS: true})
	recs, late, runErr := run.Records, run.Late, run.Err
	if recs == nil && runErr != nil {
		if ctx.Err() != nil {
			return fail(exitInterrupted, "%v", runErr)
		}
		return fail(exitError, "%v", runErr)
	}
	sum := traffic.SummarizeReplay(recs, capture, percentiles)
	sum.Speed = f.Speed
	sum.Engine = info.Kind
	sum.Target = info.BaseURL
	sum.LateMaxMs = float64(late.Max.Microseconds()) / 1000
	sum.LateMedianMs = float64(late.Median.Microseconds()) / 1000
	if !objectives.IsZero() {
		sum.AddSLO(recs, objectives)
	}

	code = exitOK
	if runErr != nil {
		fmt.Fprintf(stderr, "tokentap replay: stopped early (%v); the summary covers the %d requests sent\n", runErr, len(recs))
		code = exitInterrupted
		if !errors.Is(runErr, context.Canceled) {
			code = exitError
		}
	}
	if f.Records != "" {
		if err := recT.Write(stdout, func(w io.Writer) error { return writeRecords(w, recs) }); err != nil {
			fmt.Fprintf(stderr, "tokentap replay: --records: %v\n", err)
			code = max(code, exitError)
		}
	}
	if f.Out != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		if err := outT.Write(stdout, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
			fmt.Fprintf(stderr, "tokentap replay: --out: %v\n", err)
			code = max(code, exitError)
		}
	}
	if f.Format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
	} else {
		sum.WriteText(stdout)
	}
	// Requests the engine refused in the capture are sent as they were and
	// may fail again; more failures than captured is a broken replay.
	if extra := sum.Failed - sum.Captured.Failed; extra > 0 && code == exitOK {
		if f.AllowFailed {
			fmt.Fprintf(stderr, "tokentap replay: %d more requests failed than in the capture; exit 0 (--allow-failed).\n", extra)
		} else {
			fmt.Fprintf(stderr, "tokentap replay: %d more requests failed than in the capture (%d against %d); exit %d. Give --allow-failed to accept that.\n", extra, sum.Failed, sum.Captured.Failed, exitFailed)
			code = exitFailed
		}
	}
	return code
}

func writeRecords(out io.Writer, recs []record.Record) error {
	w := record.NewWriter(out)
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			return err
		}
	}
	return w.Flush()
}
