package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/tokentap/tokentap/cmd/tokentap/internal/outfile"
	"github.com/tokentap/tokentap/engines"
	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/hardware"
	"github.com/tokentap/tokentap/internal/english"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/report"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
	"github.com/tokentap/tokentap/shard"
)

// matrixFlags are the settings of `tokentap matrix`. Run settings left empty
// come from the scenario (the built-in seed matrix, the demo without
// --target, or --scenario FILE).
type matrixFlags struct {
	Target      string `env:"TARGET"`
	DemoListen  string `env:"DEMO_LISTEN"`
	Model       string `env:"MODEL"`
	APIKey      string `env:"API_KEY"`
	Contexts    string `env:"CONTEXTS"`
	Concurrency string `env:"CONCURRENCY"`
	Rate        string `env:"RATE"`
	Prefill     string `env:"PREFILL"`
	// PrefillSet: --prefill or TOKENTAP_PREFILL was given, even empty
	// (an empty list, like "none", means no prefill rows).
	PrefillSet     bool
	PrefillRepeats string        `env:"PREFILL_REPEATS"`
	Window         string        `env:"WINDOW"`
	IdleTimeout    time.Duration `env:"IDLE_TIMEOUT" envDefault:"10m"`
	MaxOutput      string        `env:"MAX_OUTPUT"`
	API            string        `env:"API"`
	KVCapacity     string        `env:"KV_CAPACITY"`
	MaxModelLen    string        `env:"MAX_MODEL_LEN"`
	Scenario       string        `env:"SCENARIO"`
	Out            string        `env:"OUT"`
	Records        string        `env:"RECORDS"`
	Format         string        `env:"FORMAT" envDefault:"text"`
	Percentiles    string        `env:"PERCENTILES" envDefault:"50,90,99"`
	AllowFailed    bool          `env:"ALLOW_FAILED"`
	Finish         bool          `env:"FINISH_REQUESTS"`
	Overwrite      bool          `env:"OVERWRITE"`
	Quiet          bool          `env:"QUIET"`
	Salt           string        `env:"SALT"`
	Shard          string        `env:"SHARD"`
	Shards         int           `env:"SHARDS"`
	StartAt        string        `env:"START_AT"`
	Gap            time.Duration `env:"GAP"`
	Rendezvous     string        `env:"RENDEZVOUS"`
	RvResolve      string        `env:"RENDEZVOUS_RESOLVE"`
	RvMargin       time.Duration `env:"RENDEZVOUS_MARGIN"`
	RvTimeout      time.Duration `env:"RENDEZVOUS_TIMEOUT"`

	HardwareType  string `env:"HARDWARE_TYPE"`
	GPU           string `env:"GPU"`
	VRAM          string `env:"VRAM"`
	CPU           string `env:"CPU"`
	RAM           string `env:"RAM"`
	OS            string `env:"OS"`
	EngineName    string `env:"ENGINE"`
	EngineVersion string `env:"ENGINE_VERSION"`
	Quantization  string `env:"QUANTIZATION"`
	Backend       string `env:"BACKEND"`
	EngineBuild   string `env:"ENGINE_BUILD"`
	LaunchCommand string `env:"LAUNCH_COMMAND"`
	ModelName     string `env:"MODEL_NAME"`
	Revision      string `env:"REVISION"`
	By            string `env:"BY"`

	LimitFlags
	LogFlags
	WorkloadFlags
}

const matrixSummary = `Run the speed test matrix (docs/METHOD.md §3) against an engine: prefill tok/s by
context, then sustained decode over contexts × concurrency, each cell for a fixed window
(or, with --rate, over contexts × request rates: Poisson arrivals, open loop).
Without --target it runs the demo: a short matrix against the built-in fake engine.
The report goes to stdout, progress to stderr; --out also writes the result document.
Every setting is checked before any load is sent. Ctrl-C stops cleanly and writes the
cells finished so far.`

func runMatrix(args []string, stdout, stderr io.Writer) int {
	var f matrixFlags
	if err := loadEnv(&f); err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return exitUsage
	}
	fs := newCLI("matrix", matrixSummary, stdout, stderr)
	fs.StringVar(&f.Target, "target", f.Target, "engine base URL, e.g. http://127.0.0.1:8000; empty: the demo against the built-in fake engine [TOKENTAP_TARGET]")
	fs.StringVar(&f.DemoListen, "demo-listen", f.DemoListen, "the demo's fake engine listens here (host:port; default 127.0.0.1 on a free port), for a machine where ports are assigned [TOKENTAP_DEMO_LISTEN]")
	fs.StringVar(&f.Model, "model", f.Model, "model name to request; empty: the engine's first model [TOKENTAP_MODEL]")
	// The key from the environment is not the flag's default: --help would print it.
	apiKey := fs.String("api-key", "", "API key sent as a Bearer token; never logged or stored [TOKENTAP_API_KEY]")
	fs.StringVar(&f.Contexts, "contexts", f.Contexts, "decode contexts in tokens, e.g. 0,16k,32k,64k,128k,248k (default from the scenario) [TOKENTAP_CONTEXTS]")
	fs.StringVar(&f.Concurrency, "concurrency", f.Concurrency, "concurrency levels, e.g. 1,2,4,8,16,32,64,128 (default from the scenario) [TOKENTAP_CONCURRENCY]")
	fs.StringVar(&f.Rate, "rate", f.Rate, "request rates per second instead of concurrency levels, e.g. 1,2,4: requests arrive at random (Poisson) times, open loop [TOKENTAP_RATE]")
	fs.StringVar(&f.Prefill, "prefill", f.Prefill, "prefill contexts, e.g. 8k,16k,32k,64k,128k, or none (default from the scenario) [TOKENTAP_PREFILL]")
	fs.StringVar(&f.PrefillRepeats, "prefill-repeats", f.PrefillRepeats, "cold requests per prefill row, each a prompt of its own; the row shows their median and spread (default from the scenario, 3) [TOKENTAP_PREFILL_REPEATS]")
	fs.StringVar(&f.Window, "window", f.Window, "measurement window per decode cell, e.g. 30s (default from the scenario) [TOKENTAP_WINDOW]")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", f.IdleTimeout, "give a request up when the engine sends no byte for this long, e.g. a hung engine (0: never) [TOKENTAP_IDLE_TIMEOUT]")
	fs.StringVar(&f.MaxOutput, "max-output", f.MaxOutput, "max_tokens of every decode request (default from the scenario, 8192 in the seed matrix) [TOKENTAP_MAX_OUTPUT]")
	fs.StringVar(&f.API, "api", f.API, "request API: chat or completions (default from the scenario) [TOKENTAP_API]")
	fs.StringVar(&f.KVCapacity, "kv-capacity", f.KVCapacity, "engine KV cache capacity in tokens, overriding the probe, e.g. 81920 or 80k [TOKENTAP_KV_CAPACITY]")
	fs.StringVar(&f.MaxModelLen, "max-model-len", f.MaxModelLen, "engine max model length in tokens, overriding the probe [TOKENTAP_MAX_MODEL_LEN]")
	fs.StringVar(&f.Scenario, "scenario", f.Scenario, "YAML scenario file with the run settings; flags override it [TOKENTAP_SCENARIO]")
	fs.StringVar(&f.Out, "out", f.Out, "write the result document (JSON) here (- is stdout); an existing file is kept unless --overwrite (default with --target: a new tokentap-run-DATE-TIME.json; the demo writes none) [TOKENTAP_OUT]")
	fs.BoolVar(&f.Overwrite, "overwrite", f.Overwrite, "let --out and --records replace existing files (never an input such as --scenario) [TOKENTAP_OVERWRITE]")
	fs.StringVar(&f.Records, "records", f.Records, "also write every request's record here (JSONL); an existing file is kept unless --overwrite [TOKENTAP_RECORDS]")
	fs.StringVar(&f.Format, "format", f.Format, "report format on stdout: text, md, csv, json, html, or none [TOKENTAP_FORMAT]")
	fs.StringVar(&f.Percentiles, "percentiles", f.Percentiles, "latency percentiles the report shows and the result holds as numbers, e.g. 50,90,99,99.9 [TOKENTAP_PERCENTILES]")
	fs.BoolVar(&f.Finish, "finish-requests", f.Finish, "let the requests still running when a window closes run to their end, not cut, so every one is judged against --slo and counted by the engine's TTFT figures (their tokens after the window count nowhere) [TOKENTAP_FINISH_REQUESTS]")
	fs.BoolVar(&f.AllowFailed, "allow-failed", f.AllowFailed, "exit 0 even when cells failed (default: exit 3, so CI can tell a broken run) [TOKENTAP_ALLOW_FAILED]")
	fs.BoolVar(&f.Quiet, "quiet", f.Quiet, "no progress display on stderr [TOKENTAP_QUIET]")
	fs.StringVar(&f.Salt, "salt", f.Salt, "prompt salt (default: random per run, so reruns never hit the engine's prefix cache; a sharded run's derives from its common start) [TOKENTAP_SALT]")
	fs.StringVar(&f.Shard, "shard", f.Shard, "run shard I of N of a sharded run, e.g. 0/3: this shard's share of every cell's requests; every shard needs the same --start-at or --rendezvous (docs/METHOD.md §10) [TOKENTAP_SHARD]")
	fs.IntVar(&f.Shards, "shards", f.Shards, "run one of N shards, the one JOB_COMPLETION_INDEX names (a Kubernetes Indexed Job sets it) [TOKENTAP_SHARDS]")
	fs.StringVar(&f.StartAt, "start-at", f.StartAt, "a sharded run's common start, RFC 3339 (e.g. 2025-06-01T12:00:00Z), a little in the future; every window opens on a schedule from it [TOKENTAP_START_AT]")
	fs.StringVar(&f.Rendezvous, "rendezvous", f.Rendezvous, "instead of --start-at: shard 0's HOST:PORT; shard 0 listens on PORT, every other shard checks in there once ready, and shard 0 fixes the common start when all have (a Kubernetes Indexed Job: $(JOB_NAME)-0.SERVICE:7070; docs/METHOD.md §10) [TOKENTAP_RENDEZVOUS]")
	fs.StringVar(&f.RvResolve, "rendezvous-resolve", f.RvResolve, "the address (IP or IP:PORT) --rendezvous's host stands for: dialled instead of asking DNS, and shard 0 listens there instead of on every interface [TOKENTAP_RENDEZVOUS_RESOLVE]")
	fs.DurationVar(&f.RvMargin, "rendezvous-margin", f.RvMargin, "how far ahead of the last shard's check-in shard 0 sets the start (default 10s) [TOKENTAP_RENDEZVOUS_MARGIN]")
	fs.DurationVar(&f.RvTimeout, "rendezvous-timeout", f.RvTimeout, "how long the shards wait for each other to be ready before they give up (default 10m) [TOKENTAP_RENDEZVOUS_TIMEOUT]")
	fs.DurationVar(&f.Gap, "gap", f.Gap, "a sharded run's gap before each window, for drain and warm-up (default 30s; long contexts need more) [TOKENTAP_GAP]")
	fs.StringVar(&f.HardwareType, "hardware-type", f.HardwareType, "hardware type for the report, e.g. \"Discrete GPU\" [TOKENTAP_HARDWARE_TYPE]")
	fs.StringVar(&f.GPU, "gpu", f.GPU, "GPU for the report, e.g. \"RTX 3060\" (default: detected when the engine runs here) [TOKENTAP_GPU]")
	fs.StringVar(&f.VRAM, "vram", f.VRAM, "VRAM for the report, e.g. \"12 GB\" [TOKENTAP_VRAM]")
	fs.StringVar(&f.CPU, "cpu", f.CPU, "CPU for the report [TOKENTAP_CPU]")
	fs.StringVar(&f.RAM, "ram", f.RAM, "RAM for the report, e.g. \"32 GB\" [TOKENTAP_RAM]")
	fs.StringVar(&f.OS, "os", f.OS, "OS for the report [TOKENTAP_OS]")
	fs.StringVar(&f.EngineName, "engine", f.EngineName, "engine name for the report (default: probed) [TOKENTAP_ENGINE]")
	fs.StringVar(&f.EngineVersion, "engine-version", f.EngineVersion, "engine version for the report (default: probed) [TOKENTAP_ENGINE_VERSION]")
	fs.StringVar(&f.Quantization, "quantization", f.Quantization, "quantization for the report, e.g. \"AWQ 4-bit\" [TOKENTAP_QUANTIZATION]")
	fs.StringVar(&f.Backend, "backend", f.Backend, "backend for the report, e.g. cuda [TOKENTAP_BACKEND]")
	fs.StringVar(&f.EngineBuild, "engine-build", f.EngineBuild, "engine build for the report, e.g. a container image [TOKENTAP_ENGINE_BUILD]")
	fs.StringVar(&f.LaunchCommand, "launch-command", f.LaunchCommand, "the engine's launch command, for the report [TOKENTAP_LAUNCH_COMMAND]")
	fs.StringVar(&f.ModelName, "model-name", f.ModelName, "model display name for the report (default: the served name) [TOKENTAP_MODEL_NAME]")
	fs.StringVar(&f.Revision, "revision", f.Revision, "model revision for the report [TOKENTAP_REVISION]")
	fs.StringVar(&f.By, "by", f.By, "who ran the matrix, for the report [TOKENTAP_BY]")
	f.WorkloadFlags.register(fs)
	f.LimitFlags.register(fs)
	f.LogFlags.register(fs)
	if code, done := fs.parse(args); done {
		return code
	}
	if *apiKey != "" {
		f.APIKey = *apiKey
	}
	_, f.PrefillSet = os.LookupEnv("TOKENTAP_PREFILL")
	f.PrefillSet = f.PrefillSet || fs.given("prefill")
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "tokentap matrix: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(exitUsage, "unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	log, err := f.loggerBeside(stderr, !f.Quiet)
	if err != nil {
		return fail(exitUsage, "%s: %v", fs.source("log-level"), err)
	}

	// Everything that can be checked is checked here, before any load.
	demo := f.Target == ""
	if !demo {
		if f.Target, err = targetURL(f.Target, fs.source("target")); err != nil {
			return fail(exitUsage, "%v", err)
		}
		if f.DemoListen != "" {
			return fail(exitUsage, "%s is the demo's fake engine's address, and --target runs no demo: drop one of them", fs.source("demo-listen"))
		}
	}
	if f.DemoListen == "" {
		f.DemoListen = "127.0.0.1:0"
	} else if err := checkListen(fs.source("demo-listen"), f.DemoListen); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if err := checkFormat(f.Format, fs.source("format"), true); err != nil {
		return fail(exitUsage, "%v", err)
	}
	percentiles, err := result.ParsePercentiles(f.Percentiles)
	if err != nil {
		return fail(exitUsage, "%s %v", fs.source("percentiles"), err)
	}
	if err := checkIdleTimeout(f.IdleTimeout, fs.source("idle-timeout")); err != nil {
		return fail(exitUsage, "%v", err)
	}
	// The outputs: never one of the inputs, never each other, an existing
	// file kept unless --overwrite.
	inputs := []string{f.Scenario, f.LimitFlags.ModelConfig}
	if err := distinct(f.Out, fs.source("out"), f.Records, fs.source("records")); err != nil {
		return fail(exitUsage, "%v", err)
	}
	var out outfile.Target
	if f.Out != "" {
		if out, err = output(f.Out, fs.source("out"), f.Overwrite, inputs...); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}
	cfg := matrix.Config{
		Target: replay.Target{BaseURL: f.Target, APIKey: f.APIKey, Model: f.Model, IdleTimeout: idleTimeout(f.IdleTimeout)},
		Tool:   result.Tool{Name: "tokentap", Version: version, Commit: commit},
		Salt:   f.Salt,
		Log:    log,
		By:     f.By,

		FinishRequests: f.Finish,
	}
	given := result.Hardware{Type: f.HardwareType, GPU: f.GPU, VRAM: f.VRAM, CPU: f.CPU, RAM: f.RAM, OS: f.OS}
	cfg.Engine = result.Engine{Name: f.EngineName, Version: f.EngineVersion, Quantization: f.Quantization,
		Backend: f.Backend, Build: f.EngineBuild, LaunchCommand: f.LaunchCommand}
	cfg.Model = result.Model{Name: f.ModelName, Revision: f.Revision}

	var sc scenarios.Scenario
	switch {
	case f.Scenario != "":
		sc, err = scenarios.Load(f.Scenario)
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
	case demo:
		sc = scenarios.Demo()
	default:
		sc = scenarios.Seed()
	}
	if err := applyRunFlags(&sc, &cfg, f, fs.source); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if err := f.WorkloadFlags.apply(&sc, f.Window != "" || (f.Scenario != "" && sc.Window > 0), f.Contexts != "", f.PrefillSet, f.Scenario == "", fs.source); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if err := sc.Validate(); err != nil {
		return fail(exitUsage, "run settings: %v", err)
	}
	if err := f.LimitFlags.apply(&cfg); err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return exitUsage
	}
	cfg.Limits.ReadModelFile = demo || isLocal(f.Target)
	if err := applyShardFlags(&cfg, f, os.Getenv("JOB_COMPLETION_INDEX")); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if cfg.Shard.Sharded() && (len(sc.Rates) > 0 || sc.Sweep) {
		return fail(exitUsage, "a sharded run measures concurrency cells: request rates (--rate, --sweep) are an open loop one load generator paces; run them without --shard")
	}
	if err := loadDataset(sc, &cfg); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if cfg.Dataset != nil {
		inputs = append(inputs, sc.Dataset)
		if api := datasetAPI(cfg.Dataset.Format); f.API != "" && !strings.EqualFold(f.API, api) {
			return fail(exitUsage, "%s %s, but %s holds %s requests (they go to /v1/%s): leave %s out", fs.source("api"), f.API, sc.Dataset, cfg.Dataset.Format, map[string]string{"chat": "chat/completions", "completions": "completions"}[api], fs.source("api"))
		} else {
			sc.API = api
		}
	}
	cfg.Scenario = sc
	cfg.Percentiles = percentiles
	var recw *record.Writer
	var recOut outfile.Target
	// finishRecords flushes and commits --records (or drops it when no
	// load was sent); nil without --records. A record file is output: its
	// failure exits 1, as --out's does.
	var finishRecords func() error
	ran := false // matrix.Run sent load (there is a result)
	if f.Records != "" {
		if recOut, err = output(f.Records, fs.source("records"), f.Overwrite, inputs...); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}
	// A real run takes long: keep its result even when --out was not given
	// (and after Ctrl-C), under a name no other run has. The demo writes
	// nothing unless asked.
	reserved := false
	if f.Out == "" && !demo {
		if f.Out, err = reserveResultName(".", time.Now()); err != nil {
			return fail(exitUsage, "%v (give --out)", err)
		}
		reserved = true
		if out, err = output(f.Out, "the result file", true); err != nil {
			os.Remove(f.Out)
			return fail(exitUsage, "%v (give --out)", err)
		}
	}
	unreserve := func() {
		if reserved {
			os.Remove(f.Out)
		}
	}
	if f.Records != "" {
		rf, err := recOut.Create(stdout)
		if err != nil {
			unreserve()
			return fail(exitUsage, "%s %s: %v", fs.source("records"), f.Records, err)
		}
		recw = record.NewWriter(rf)
		closed := false
		finishRecords = func() error {
			// Kept however a run that sent load ended: its records say
			// what happened. A run refused before any load keeps none.
			if closed {
				return nil
			}
			closed = true
			if !ran {
				rf.Abort()
				return nil
			}
			if err := recw.Flush(); err != nil {
				rf.Abort()
				return err
			}
			return rf.Commit()
		}
		// A return before the run's end (a refusal, a panic) still closes
		// the file; the run's own end closes it first, to set the exit code.
		defer func() {
			if err := finishRecords(); err != nil {
				fmt.Fprintf(stderr, "tokentap matrix: writing %s: %v\n", f.Records, err)
			}
		}()
		cfg.OnRecords = func(recs []record.Record) {
			for i := range recs {
				if err := recw.Write(&recs[i]); err != nil {
					// The file has failed so long that 16 MiB of
					// records wait for it: the end of the run's flush
					// reports its error and exits 1.
					log.Error().Err(err).Msg("writing records")
					return
				}
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once

	allowFailed := f.AllowFailed
	if demo {
		eng, err := startDemoEngine(f.DemoListen)
		if err != nil {
			return fail(exitError, "starting the built-in fake engine on %s: %v (another --demo-listen address, or none for a free port)", f.DemoListen, err)
		}
		defer eng.Close()
		cfg.Target.BaseURL = eng.URL()
		given = hardware.Override(demoHardware(), given)
		if cfg.Engine.Name == "" {
			cfg.Engine.Name = "tokentap-fake"
			cfg.Engine.Version = version
			cfg.Engine.Backend = "simulated"
			cfg.Engine.LaunchCommand = "tokentap matrix   # demo: no --target, so the built-in fake engine (vLLM-like, a 4B model on a simulated 12 GB GPU) runs in-process"
		}
		if cfg.Model.Name == "" {
			cfg.Model.Name = "demo-4b (fake engine)"
		}
		// The demo fails a row on purpose, where it has one of 6,000
		// tokens or more (demoFault): that is no reason to fail.
		faulted := slices.ContainsFunc(sc.Contexts, func(c int) bool { return c >= 6000 })
		if faulted {
			cfg.Notes = append(cfg.Notes, demoNote)
		}
		allowFailed = true
		if !f.Quiet {
			fmt.Fprintf(stderr, "tokentap matrix: no --target, so this is the demo: a short matrix against the built-in fake engine at %s.\n", eng.URL())
			if faulted {
				fmt.Fprint(stderr, "Its 8K row fails on purpose (the fake engine injects HTTP 500 for prompts of 6,000 tokens or more) to show\n"+
					"a Failed cell; the demo runs as with --allow-failed. ")
			}
			fmt.Fprint(stderr, "Point it at your engine with --target http://host:8000.\n")
		}
	}
	if demo || isLocal(cfg.Target.BaseURL) {
		cfg.Hardware = hardware.Override(hardware.Detect(ctx), given)
	} else {
		cfg.Hardware = given
		if cfg.Hardware != (result.Hardware{}) {
			cfg.Hardware.Source = "given"
		}
	}

	cfg.Notices = stderr // even with --quiet
	if !f.Quiet {
		cfg.Progress = stderr
		if fl, ok := stderr.(*os.File); ok && isatty.IsTerminal(fl.Fd()) {
			cfg.Terminal = true
		}
	}

	res, err := matrix.Run(ctx, cfg)
	ran = res != nil
	if res == nil {
		unreserve()
		switch {
		case ctx.Err() != nil:
			return fail(exitInterrupted, "interrupted before any load was sent")
		case errors.Is(err, matrix.ErrNothingToMeasure) || errors.Is(err, engines.ErrModel) || errors.Is(err, matrix.ErrDataset):
			// The settings do not fit this engine (a context it cannot
			// hold, a model it does not serve): a usage error.
			return fail(exitUsage, "%v", err)
		case errors.As(err, new(*shard.Refusal)):
			// The rendezvous turned this shard away: another run's
			// settings, an index run twice, or too late.
			return fail(exitUsage, "%v", err)
		case errors.Is(err, engines.ErrUnreachable) || errors.Is(err, engines.ErrUnauthorized) ||
			errors.Is(err, engines.ErrNotOpenAI):
			return fail(exitEngine, "%v", err)
		}
		return fail(exitError, "%v", err)
	}
	code := exitOK
	if err != nil {
		code = exitError
		if errors.Is(err, matrix.ErrInterrupted) {
			code = exitInterrupted
		}
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", interruptedWord(err, f.Out))
	}
	if finishRecords != nil {
		if rerr := finishRecords(); rerr != nil {
			fmt.Fprintf(stderr, "tokentap matrix: writing %s: %v\n", f.Records, rerr)
			code = exitError
		}
	}
	if f.Out != "" {
		if werr := out.Write(stdout, res.Write); werr != nil {
			fmt.Fprintf(stderr, "tokentap matrix: writing %s: %v\n", f.Out, werr)
			code = exitError
		} else if !f.Quiet && out.Kind != outfile.Stdout {
			fmt.Fprintf(stderr, "tokentap matrix: result written to %s (render it again with: tokentap report %s)\n", f.Out, f.Out)
		}
	}
	if f.Format != "none" {
		if rerr := report.RenderWith(stdout, res, report.Format(f.Format), report.Options{Percentiles: percentiles}); rerr != nil {
			fmt.Fprintf(stderr, "tokentap matrix: report: %v\n", rerr)
			code = max(code, exitError)
		}
	}
	if failed := failedParts(res); len(failed) > 0 && code == exitOK {
		switch {
		case demo:
			if !f.Quiet {
				fmt.Fprintf(stderr, "tokentap matrix: %s failed, as the demo intends (an injected fault); exit 0.\n", english.List(failed))
			}
		case allowFailed:
			fmt.Fprintf(stderr, "tokentap matrix: %s failed; exit 0 (--allow-failed).\n", english.List(failed))
		default:
			fmt.Fprintf(stderr, "tokentap matrix: %s failed (the report says why); exit %d. Give --allow-failed to accept failed cells.\n", english.List(failed), exitFailed)
			code = exitFailed
		}
	}
	return code
}

// demoNote tells the demo's reader that its Failed row is no fault of
// tokentap's.
const demoNote = "Demo: the fake engine fails every request of 6,000 prompt tokens or more with HTTP 500 on purpose (an injected fault), so the 8K row shows what a Failed cell looks like. A run against a real engine has no injected faults."

// failedParts names what failed in a run: Failed prefill rows and decode
// cells, e.g. "the 8K prefill row" or "2 cells (8K × 1, 8K × 2)".
func failedParts(r *result.Result) []string {
	var rows, cells []string
	for _, p := range r.Prefill {
		if p.Status == result.Failed {
			rows = append(rows, matrix.TokenLabel(p.Context))
		}
	}
	for _, c := range r.Decode {
		if c.Status == result.Failed {
			cells = append(cells, matrix.TokenLabel(c.Context)+" × "+matrix.ColumnLabel(c))
		}
	}
	var out []string
	if len(rows) > 0 {
		out = append(out, english.Count(len(rows), "prefill row", "prefill rows")+" ("+strings.Join(rows, ", ")+")")
	}
	if len(cells) > 0 {
		out = append(out, english.Count(len(cells), "decode cell", "decode cells")+" ("+strings.Join(cells, ", ")+")")
	}
	return out
}

// applyRunFlags lays the run flags given (flag or env) over the scenario.
// src names where a setting came from (its flag or variable) for errors;
// nil: the flag.
func applyRunFlags(sc *scenarios.Scenario, cfg *matrix.Config, f matrixFlags, src func(string) string) error {
	if src == nil {
		src = func(name string) string { return "--" + name }
	}
	var err error
	if f.Contexts != "" {
		if sc.Contexts, err = scenarios.ParseTokenList(f.Contexts); err != nil {
			return fmt.Errorf("%s: %w", src("contexts"), err)
		}
	}
	if f.Concurrency != "" && f.Rate != "" {
		return fmt.Errorf("%s and %s are both given: a matrix's columns are concurrency levels (closed loop) or request rates (open loop), not both", src("concurrency"), src("rate"))
	}
	if f.Concurrency != "" {
		if sc.Concurrency, err = scenarios.ParseCountList(f.Concurrency, "concurrency level", 1); err != nil {
			return fmt.Errorf("%s: %w", src("concurrency"), err)
		}
		sc.Rates = nil
	}
	if f.Rate != "" {
		if sc.Rates, err = scenarios.ParseRateList(f.Rate); err != nil {
			return fmt.Errorf("%s: %w", src("rate"), err)
		}
		sc.Concurrency = nil
	}
	if f.Prefill != "" || f.PrefillSet {
		if sc.Prefill, err = scenarios.ParsePrefillList(f.Prefill); err != nil {
			return fmt.Errorf("%s: %w", src("prefill"), err)
		}
	}
	if f.PrefillRepeats != "" {
		if sc.PrefillRepeats, err = scenarios.ParsePrefillRepeats(f.PrefillRepeats); err != nil {
			return fmt.Errorf("%s: %w", src("prefill-repeats"), err)
		}
	}
	if f.Window != "" {
		if sc.Window, err = time.ParseDuration(strings.TrimSpace(f.Window)); err != nil || sc.Window <= 0 {
			return fmt.Errorf("%s %q: want a positive duration with its unit, such as 30s or 2m", src("window"), f.Window)
		}
	}
	if f.MaxOutput != "" {
		if sc.MaxOutput, err = scenarios.ParseTokens(f.MaxOutput); err != nil || sc.MaxOutput < 1 {
			return fmt.Errorf("%s %q: want a positive number of tokens", src("max-output"), f.MaxOutput)
		}
	}
	if f.API != "" {
		a := strings.ToLower(f.API)
		if a != string(record.Chat) && a != string(record.Completions) {
			return fmt.Errorf("%s %q: use chat or completions", src("api"), f.API)
		}
		sc.API = a
	}
	if f.KVCapacity != "" {
		if cfg.KVCapacity, err = scenarios.ParseTokens(f.KVCapacity); err != nil || cfg.KVCapacity < 1 {
			return fmt.Errorf("%s %q: want a positive number of tokens", src("kv-capacity"), f.KVCapacity)
		}
	}
	if f.MaxModelLen != "" {
		if cfg.MaxModelLen, err = scenarios.ParseTokens(f.MaxModelLen); err != nil || cfg.MaxModelLen < 1 {
			return fmt.Errorf("%s %q: want a positive number of tokens", src("max-model-len"), f.MaxModelLen)
		}
	}
	if f.Model != "" {
		sc.Model = f.Model
	}
	if len(sc.Contexts) == 0 || (len(sc.Concurrency) == 0 && len(sc.Rates) == 0) {
		return errors.New("no decode cells: give --contexts and --concurrency or --rate (or a scenario that sets them)")
	}
	return nil
}

// isLocal reports whether the target runs on this machine, so detected
// hardware describes the engine's.
func isLocal(target string) bool {
	t := strings.ToLower(target)
	for _, h := range []string{"://127.", "://localhost", "://[::1]", "://0.0.0.0"} {
		if strings.Contains(t, h) {
			return true
		}
	}
	return strings.HasPrefix(t, "127.") || strings.HasPrefix(t, "localhost")
}

// demoModel is the fake engine of the demo, shaped after seed page 000 (a 4B
// model on a 12 GB GPU) and scaled down so the matrix finishes in well under
// a minute: KV cache for 13K tokens, 8 sequences at most, 16K max model
// length. With the demo scenario (contexts 0–16K, concurrency 1–16, max
// output 512) this yields every status: Over capacity cells by KV capacity,
// a Requests queued cell at 16 streams (more than 8 run at once), a Failed
// 8K row (an engine-wide fault on long prompts, like seed 000's 64K row) and
// a 16K context dropped for not fitting the max model length.
func demoModel() fixtures.Model {
	m := fixtures.DefaultModel()
	m.Name = "demo-4b"
	m.MaxModelLen = 16384
	m.KVCapacity = 13312
	m.MaxRunning = 8
	return m
}

// demoFault makes every request of 6,000 prompt tokens or more fail.
const demoFault = "status=500,min-prompt=6000"

func startDemoEngine(addr string) (*fixtures.Engine, error) {
	fault, err := fixtures.ParseFault(demoFault)
	if err != nil {
		return nil, err
	}
	eng := fixtures.New(demoModel(), fixtures.WithFaults(fault))
	if _, err := eng.Start(addr); err != nil {
		return nil, err
	}
	return eng, nil
}

func demoHardware() result.Hardware {
	return result.Hardware{Type: "Simulated GPU (tokentap fake engine)", GPU: "simulated, shaped like an RTX 3060", VRAM: "12 GB (simulated)"}
}

// interruptedWord is what an interrupted run says: ErrInterrupted speaks
// of the result holding the cells finished, and a run that writes no
// result (the demo, without --out) says what it showed instead.
func interruptedWord(err error, out string) error {
	if out == "" && errors.Is(err, matrix.ErrInterrupted) {
		return errors.New("matrix run interrupted; the report above shows the cells finished so far (no result file: give --out to keep one)")
	}
	return err
}
