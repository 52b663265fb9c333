package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/fixtures"
)

// fakeEngineConfig holds the fake-engine settings; the model fields start
// from fixtures.DefaultModel.
type fakeEngineConfig struct {
	Listen           string        `env:"FAKE_LISTEN"`
	Flavor           string        `env:"FAKE_FLAVOR"`
	Slots            int           `env:"FAKE_SLOTS"`
	UnifiedKV        bool          `env:"FAKE_KV_UNIFIED"`
	TrainedLen       int           `env:"FAKE_TRAINED_LEN"`
	NumCtxListed     bool          `env:"FAKE_NUM_CTX_LISTED"`
	HoldBack         int           `env:"FAKE_HOLD_BACK"`
	Name             string        `env:"FAKE_MODEL"`
	StrictModel      bool          `env:"FAKE_STRICT_MODEL"`
	Version          string        `env:"FAKE_VERSION"`
	MaxModelLen      int           `env:"FAKE_MAX_MODEL_LEN"`
	PrefillTokPerSec float64       `env:"FAKE_PREFILL_TOK_PER_SEC"`
	PrefillSlowdown  float64       `env:"FAKE_PREFILL_SLOWDOWN"`
	FirstEventDelay  time.Duration `env:"FAKE_FIRST_EVENT_DELAY"`
	TBTBase          time.Duration `env:"FAKE_TBT_BASE"`
	TBTPerRunning    time.Duration `env:"FAKE_TBT_PER_RUNNING"`
	TBTPerKTokens    time.Duration `env:"FAKE_TBT_PER_KTOKENS"`
	MaxRunning       int           `env:"FAKE_MAX_RUNNING"`
	KVCapacity       int           `env:"FAKE_KV_CAPACITY"`
	BlockSize        int           `env:"FAKE_BLOCK_SIZE"`
	MaxWaiting       int           `env:"FAKE_MAX_WAITING"`
	TokensPerEvent   int           `env:"FAKE_TOKENS_PER_EVENT"`
	NoEventCounts    bool          `env:"FAKE_NO_EVENT_COUNTS"`
	StopAfter        int           `env:"FAKE_STOP_AFTER"`
	FinishChunk      bool          `env:"FAKE_FINISH_CHUNK"`
	Faults           []string      `env:"FAKE_FAULT" envSeparator:";"`
	Ledger           bool          `env:"FAKE_LEDGER"`
	LogFlags
}

func defaultFakeEngineConfig() fakeEngineConfig {
	m := fixtures.DefaultModel()
	return fakeEngineConfig{
		Listen: "127.0.0.1:8000", Name: m.Name, Version: m.Version, MaxModelLen: m.MaxModelLen,
		PrefillTokPerSec: m.PrefillTokPerSec, PrefillSlowdown: m.PrefillSlowdown,
		FirstEventDelay: m.FirstEventDelay, TBTBase: m.TBTBase, TBTPerRunning: m.TBTPerRunning,
		TBTPerKTokens: m.TBTPerKTokens, MaxRunning: m.MaxRunning, KVCapacity: m.KVCapacity,
		BlockSize: m.BlockSize, MaxWaiting: m.MaxWaiting, TokensPerEvent: m.TokensPerEvent,
		StopAfter: m.StopAfter, FinishChunk: m.FinishChunk,
		LogFlags: LogFlags{Level: "warn"},
	}
}

func (c *fakeEngineConfig) model() (fixtures.Model, error) {
	fl, err := fixtures.ParseFlavor(c.Flavor)
	if err != nil {
		return fixtures.Model{}, err
	}
	return fixtures.Model{
		Name: c.Name, AnyModel: !c.StrictModel, Version: c.Version, MaxModelLen: c.MaxModelLen,
		PrefillTokPerSec: c.PrefillTokPerSec, PrefillSlowdown: c.PrefillSlowdown,
		FirstEventDelay: c.FirstEventDelay, TBTBase: c.TBTBase, TBTPerRunning: c.TBTPerRunning,
		TBTPerKTokens: c.TBTPerKTokens, MaxRunning: c.MaxRunning, KVCapacity: c.KVCapacity,
		BlockSize: c.BlockSize, MaxWaiting: c.MaxWaiting, TokensPerEvent: c.TokensPerEvent,
		NoEventCounts: c.NoEventCounts, StopAfter: c.StopAfter, FinishChunk: c.FinishChunk,
		Flavor: fl, Slots: c.Slots,
		LlamaCpp: fixtures.LlamaCpp{UnifiedKV: c.UnifiedKV},
		Ollama:   fixtures.Ollama{TrainedLen: c.TrainedLen, NumCtxSet: c.NumCtxListed, HoldBack: c.HoldBack},
	}, nil
}

// Flavour defaults, as the real engines start without their flags:
// llama-server's --parallel is 4 slots sharing one unified KV cache (-kvu,
// the default when --parallel is not given), OLLAMA_NUM_PARALLEL is 1.
const (
	llamaDefaultSlots  = 4
	ollamaDefaultSlots = 1
)

// flavorDefaults gives a llama.cpp or Ollama fake what the real engine has
// when it is started without flags, for every setting not given (given
// reports a flag or its variable), so --flavor alone starts. For
// llama.cpp, --max-model-len is the context of one slot (/props n_ctx):
// the KV cache is that, or that per slot without --kv-unified, unless
// --kv-capacity says otherwise; the two must then agree.
func (c *fakeEngineConfig) flavorDefaults(given func(flag, env string) bool) error {
	fl, err := fixtures.ParseFlavor(c.Flavor)
	if err != nil {
		return fmt.Errorf("--%w", err)
	}
	if !given("strict-model", "TOKENTAP_FAKE_STRICT_MODEL") {
		// vLLM answers a model it does not serve with 404 (serving_engine.py,
		// _check_model: "The model `x` does not exist.", NotFoundError), as
		// Ollama does ("model \"x\" not found"); llama-server and TGI serve
		// the request with the model they have, whatever it names.
		c.StrictModel = fl == fixtures.FlavorVLLM || fl == fixtures.FlavorOllama
	}
	switch fl {
	case fixtures.FlavorOllama:
		if !given("slots", "TOKENTAP_FAKE_SLOTS") {
			c.Slots = ollamaDefaultSlots
		}
	case fixtures.FlavorLlamaCpp:
		if !given("slots", "TOKENTAP_FAKE_SLOTS") {
			c.Slots = llamaDefaultSlots
			if !given("kv-unified", "TOKENTAP_FAKE_KV_UNIFIED") {
				c.UnifiedKV = true
			}
		}
		if c.Slots <= 0 {
			return nil // Validate names --slots
		}
		perSlot := c.Slots
		if c.UnifiedKV {
			perSlot = 1
		}
		switch kvGiven := given("kv-capacity", "TOKENTAP_FAKE_KV_CAPACITY"); {
		case !kvGiven:
			c.KVCapacity = c.MaxModelLen * perSlot
		case given("max-model-len", "TOKENTAP_FAKE_MAX_MODEL_LEN") && c.KVCapacity/perSlot != c.MaxModelLen:
			return fmt.Errorf("--max-model-len %d and --kv-capacity %d disagree: a llama.cpp slot's context is the KV cache%s (%d); give one of them",
				c.MaxModelLen, c.KVCapacity, map[bool]string{true: " (unified, --kv-unified)", false: " ÷ --slots"}[c.UnifiedKV], c.KVCapacity/perSlot)
		default:
			c.MaxModelLen = c.KVCapacity / perSlot
		}
	}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, "; ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

const fakeEngineSummary = `Serve the built-in fake engine: vLLM-like HTTP API (/v1/models, /v1/chat/completions,
/v1/completions, /tokenize, /version, /health, /metrics) with known timing, so tokentap
can be tried without a GPU. --flavor llama.cpp or ollama makes it look and schedule like
those engines instead (slots with per-slot prompt caches, llama.cpp's /props, /slots and
unified KV cache, Ollama's /api/ps, /api/show, silent truncation and held-back tokens). The timing model: TTFT = prefill (uncached prompt tokens at
--prefill-tok-per-sec, slowed by --prefill-slowdown per 1K tokens) + --first-event-delay;
time between tokens = --tbt-base + --tbt-per-running x running + --tbt-per-ktokens x
context K-tokens in flight. Requests beyond --max-running or --kv-capacity wait in a queue.
Prints the base URL on stdout; stops on Ctrl-C.`

// fakeEngineSetup is what the flags and environment asked for.
type fakeEngineSetup struct {
	cfg    fakeEngineConfig
	model  fixtures.Model
	faults []fixtures.Fault
}

// parseFakeEngine reads defaults, then TOKENTAP_* variables, then flags. done
// means exit now with code (help shown, or a bad setting explained).
func parseFakeEngine(args []string, stdout, stderr io.Writer) (setup fakeEngineSetup, code int, done bool) {
	cfg := defaultFakeEngineConfig()
	if err := loadEnv(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap fake-engine: %v\n", err)
		return setup, 2, true
	}
	fs := newCLI("fake-engine", fakeEngineSummary, stdout, stderr)
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to serve on, host:port (port 0 picks a free one) [TOKENTAP_FAKE_LISTEN]")
	fs.StringVar(&cfg.Flavor, "flavor", cfg.Flavor, "which engine to look and schedule like: vllm, llama.cpp, ollama, tgi or sglang [TOKENTAP_FAKE_FLAVOR]")
	fs.IntVar(&cfg.Slots, "slots", cfg.Slots, "llama.cpp/ollama: requests run at once (--parallel, OLLAMA_NUM_PARALLEL); each slot caches its last prompt (default: llama.cpp 4, sharing a unified KV cache; ollama 1) [TOKENTAP_FAKE_SLOTS]")
	fs.BoolVar(&cfg.UnifiedKV, "kv-unified", cfg.UnifiedKV, "llama.cpp: the slots share one KV cache of --kv-capacity tokens (-kvu) instead of an equal share each (default: on when --slots is not given, as llama-server's -kvu without --parallel) [TOKENTAP_FAKE_KV_UNIFIED]")
	fs.IntVar(&cfg.TrainedLen, "trained-len", cfg.TrainedLen, "ollama: the trained context /api/show reports; --max-model-len is the one it runs at [TOKENTAP_FAKE_TRAINED_LEN]")
	fs.BoolVar(&cfg.NumCtxListed, "num-ctx-listed", cfg.NumCtxListed, "ollama: /api/show lists num_ctx (the model was created with it) [TOKENTAP_FAKE_NUM_CTX_LISTED]")
	fs.IntVar(&cfg.HoldBack, "hold-back", cfg.HoldBack, "ollama: every Nth output token starts with '<' and is sent with the next one, unannounced; 0: never [TOKENTAP_FAKE_HOLD_BACK]")
	fs.StringVar(&cfg.Name, "model", cfg.Name, "served model name, as /v1/models lists it (see --strict-model for requests naming another) [TOKENTAP_FAKE_MODEL]")
	fs.BoolVar(&cfg.StrictModel, "strict-model", cfg.StrictModel, "answer a request naming another model than --model with 404, as vLLM (\"The model ... does not exist.\") and Ollama do; =false serves it as --model, as llama-server, SGLang and TGI do (default: on for --flavor vllm and ollama, off for llama.cpp and tgi) [TOKENTAP_FAKE_STRICT_MODEL]")
	fs.StringVar(&cfg.Version, "engine-version", cfg.Version, "version GET /version reports [TOKENTAP_FAKE_VERSION]")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", cfg.MaxModelLen, "max prompt + output tokens of one request: a prompt or a max_tokens over it gets HTTP 400; both together over it get 400 too, but for the vLLM flavour, which serves them and stops at the limit (finish_reason length), as vLLM 0.32 does (llama.cpp: one slot's context, /props n_ctx; the KV cache follows unless --kv-capacity is given) [TOKENTAP_FAKE_MAX_MODEL_LEN]")
	fs.Float64Var(&cfg.PrefillTokPerSec, "prefill-tok-per-sec", cfg.PrefillTokPerSec, "prefill speed P for short prompts, tokens/s [TOKENTAP_FAKE_PREFILL_TOK_PER_SEC]")
	fs.Float64Var(&cfg.PrefillSlowdown, "prefill-slowdown", cfg.PrefillSlowdown, "prefill rate for u tokens is P/(1 + this x u/1024); 0 keeps it constant [TOKENTAP_FAKE_PREFILL_SLOWDOWN]")
	fs.DurationVar(&cfg.FirstEventDelay, "first-event-delay", cfg.FirstEventDelay, "delay between end of prefill and the first token [TOKENTAP_FAKE_FIRST_EVENT_DELAY]")
	fs.DurationVar(&cfg.TBTBase, "tbt-base", cfg.TBTBase, "time between tokens, fixed part [TOKENTAP_FAKE_TBT_BASE]")
	fs.DurationVar(&cfg.TBTPerRunning, "tbt-per-running", cfg.TBTPerRunning, "added to the time between tokens per running request [TOKENTAP_FAKE_TBT_PER_RUNNING]")
	fs.DurationVar(&cfg.TBTPerKTokens, "tbt-per-ktokens", cfg.TBTPerKTokens, "added to the time between tokens per 1,024 context tokens in flight [TOKENTAP_FAKE_TBT_PER_KTOKENS]")
	fs.IntVar(&cfg.MaxRunning, "max-running", cfg.MaxRunning, "most requests running at once (vLLM --max-num-seqs) [TOKENTAP_FAKE_MAX_RUNNING]")
	fs.IntVar(&cfg.KVCapacity, "kv-capacity", cfg.KVCapacity, "KV cache size in tokens, a multiple of --block-size; vllm takes blocks per step and preempts when full, sglang admits against a new-token ratio and retracts when full, tgi reserves prompt + max_tokens [TOKENTAP_FAKE_KV_CAPACITY]")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "KV block size in tokens; the prefix cache works in whole blocks [TOKENTAP_FAKE_BLOCK_SIZE]")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", cfg.MaxWaiting, "most requests waiting; one more gets HTTP 503; 0 is unbounded [TOKENTAP_FAKE_MAX_WAITING]")
	fs.BoolVar(&cfg.NoEventCounts, "no-event-counts", cfg.NoEventCounts, "ignore stream_options.continuous_usage_stats: no per-event token counts, only the final usage (SGLang before PR #12241) [TOKENTAP_FAKE_NO_EVENT_COUNTS]")
	fs.IntVar(&cfg.TokensPerEvent, "tokens-per-event", cfg.TokensPerEvent, "tokens per stream event after the first, k (speculative decoding) [TOKENTAP_FAKE_TOKENS_PER_EVENT]")
	fs.IntVar(&cfg.StopAfter, "stop-after", cfg.StopAfter, "without ignore_eos, stop (finish_reason stop) after this many tokens; 0: never, always max_tokens [TOKENTAP_FAKE_STOP_AFTER]")
	fs.BoolVar(&cfg.FinishChunk, "finish-chunk", cfg.FinishChunk, "send finish_reason in its own empty-delta chunk (OpenAI style) instead of on the last token's chunk (vLLM style) [TOKENTAP_FAKE_FINISH_CHUNK]")
	faults := stringList(cfg.Faults)
	fs.Var(&faults, "fault", "engine-wide fault, repeatable: comma list of status=CODE, cut=N, stall=D@N, malformed@N, header-delay=D, min-prompt=N (per request: header X-Fake-Fault) [TOKENTAP_FAKE_FAULT, ';'-separated]")
	fs.BoolVar(&cfg.Ledger, "ledger", cfg.Ledger, "record the ground-truth ledger and serve it on GET /fake/ledger (DELETE resets) [TOKENTAP_FAKE_LEDGER]")
	cfg.LogFlags.register(fs)
	if code, done := fs.parse(args); done {
		return setup, code, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tokentap fake-engine: unexpected arguments %q (every setting is a flag; see --help)\n", fs.Args())
		return setup, 2, true
	}
	var fl []fixtures.Fault
	for _, s := range faults {
		f, err := fixtures.ParseFault(s)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap fake-engine: --fault: %v\n", err)
			return setup, 2, true
		}
		fl = append(fl, f)
	}
	if err := checkListen(fs.source("listen"), cfg.Listen); err != nil {
		fmt.Fprintf(stderr, "tokentap fake-engine: %v\n", err)
		return setup, 2, true
	}
	given := func(name, env string) bool {
		_, set := os.LookupEnv(env)
		return set || fs.given(name)
	}
	err := cfg.flavorDefaults(given)
	var m fixtures.Model
	if err == nil {
		m, err = cfg.model()
	}
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "tokentap fake-engine: %v\n", err)
		return setup, 2, true
	}
	return fakeEngineSetup{cfg: cfg, model: m, faults: fl}, 0, false
}

func runFakeEngine(args []string, stdout, stderr io.Writer) int {
	setup, code, done := parseFakeEngine(args, stdout, stderr)
	if done {
		return code
	}
	cfg, m := setup.cfg, setup.model
	log, err := cfg.LogFlags.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap fake-engine: %v\n", err)
		return exitUsage
	}
	e := fixtures.New(m, fixtures.WithLogger(slog.New(zerolog.NewSlogHandler(log))), fixtures.WithLedger(cfg.Ledger),
		fixtures.WithLedgerEndpoint(cfg.Ledger), fixtures.WithFaults(setup.faults...))
	// Catch Ctrl-C before announcing the URL, so a caller that signals as
	// soon as it has read the URL gets a clean shutdown.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url, err := e.Start(cfg.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap fake-engine: %v\n", err)
		return exitError
	}
	log.Info().Str("url", url).Str("model", m.Name).Msg("fake engine serving")
	fmt.Fprintln(stdout, url)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if l := e.Load(); l.Running+l.Waiting > 0 {
		// Say why the exit waits, and let a second Ctrl-C cut at once.
		fmt.Fprintf(stderr, "tokentap fake-engine: stopping: waiting up to 5 s for %d open requests to finish (Ctrl-C again cuts them now)\n", l.Running+l.Waiting)
		defer cutOnSignal(sctx, cancel)()
	}
	if err := e.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "tokentap fake-engine: open streams were cut at shutdown\n")
	}
	return 0
}

var _ flag.Value = (*stringList)(nil)
