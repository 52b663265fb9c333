package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/tokentap/tokentap/fixtures"
	"github.com/tokentap/tokentap/hardware"
	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/record"
	"github.com/tokentap/tokentap/replay"
	"github.com/tokentap/tokentap/report"
	"github.com/tokentap/tokentap/result"
	"github.com/tokentap/tokentap/scenarios"
)

// matrixFlags are the settings of `tokentap matrix`. Run settings left empty
// come from the scenario (the built-in seed matrix, the demo without
// --target, or --scenario FILE).
type matrixFlags struct {
	Target      string `env:"TARGET"`
	Model       string `env:"MODEL"`
	APIKey      string `env:"API_KEY"`
	Contexts    string `env:"CONTEXTS"`
	Concurrency string `env:"CONCURRENCY"`
	Prefill     string `env:"PREFILL"`
	// PrefillSet: --prefill or TOKENTAP_PREFILL was given, even empty
	// (an empty list, like "none", means no prefill rows).
	PrefillSet  bool
	Window      string        `env:"WINDOW"`
	IdleTimeout time.Duration `env:"IDLE_TIMEOUT" envDefault:"10m"`
	MaxOutput   string        `env:"MAX_OUTPUT"`
	API         string        `env:"API"`
	KVCapacity  string        `env:"KV_CAPACITY"`
	MaxModelLen string        `env:"MAX_MODEL_LEN"`
	Scenario    string        `env:"SCENARIO"`
	Out         string        `env:"OUT"`
	Records     string        `env:"RECORDS"`
	Format      string        `env:"FORMAT" envDefault:"text"`
	Quiet       bool          `env:"QUIET"`
	Salt        string        `env:"SALT"`
	Shard       string        `env:"SHARD"`
	Shards      int           `env:"SHARDS"`
	StartAt     string        `env:"START_AT"`
	Gap         time.Duration `env:"GAP"`

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

	LogFlags
}

const matrixSummary = `Run the speed test matrix (docs/METHOD.md §3) against an engine: prefill tok/s by
context, then sustained decode over contexts × concurrency, each cell for a fixed window.
Without --target it runs the demo: a short matrix against the built-in fake engine.
The report goes to stdout, progress to stderr; --out also writes the result document.
Ctrl-C stops cleanly and writes the cells finished so far.`

func runMatrix(args []string, stdout, stderr io.Writer) int {
	var f matrixFlags
	if err := loadEnv(&f); err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return 2
	}
	fs := newFlagSet("matrix", matrixSummary, stderr)
	fs.StringVar(&f.Target, "target", f.Target, "engine base URL, e.g. http://127.0.0.1:8000; empty: the demo against the built-in fake engine [TOKENTAP_TARGET]")
	fs.StringVar(&f.Model, "model", f.Model, "model name to request; empty: the engine's first model [TOKENTAP_MODEL]")
	// The key from the environment is not the flag's default: --help would print it.
	apiKey := fs.String("api-key", "", "API key sent as a Bearer token; never logged or stored [TOKENTAP_API_KEY]")
	fs.StringVar(&f.Contexts, "contexts", f.Contexts, "decode contexts in tokens, e.g. 0,16k,32k,64k,128k,248k (default from the scenario) [TOKENTAP_CONTEXTS]")
	fs.StringVar(&f.Concurrency, "concurrency", f.Concurrency, "concurrency levels, e.g. 1,2,4,8,16,32,64,128 (default from the scenario) [TOKENTAP_CONCURRENCY]")
	fs.StringVar(&f.Prefill, "prefill", f.Prefill, "prefill contexts, e.g. 8k,16k,32k,64k,128k, or none (default from the scenario) [TOKENTAP_PREFILL]")
	fs.StringVar(&f.Window, "window", f.Window, "measurement window per decode cell, e.g. 30s (default from the scenario) [TOKENTAP_WINDOW]")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", f.IdleTimeout, "give a request up when the engine sends no byte for this long, e.g. a hung engine (0: never) [TOKENTAP_IDLE_TIMEOUT]")
	fs.StringVar(&f.MaxOutput, "max-output", f.MaxOutput, "max_tokens of every decode request (default from the scenario, 8192 in the seed matrix) [TOKENTAP_MAX_OUTPUT]")
	fs.StringVar(&f.API, "api", f.API, "request API: chat or completions (default from the scenario) [TOKENTAP_API]")
	fs.StringVar(&f.KVCapacity, "kv-capacity", f.KVCapacity, "engine KV cache capacity in tokens, overriding the probe, e.g. 81920 or 80k [TOKENTAP_KV_CAPACITY]")
	fs.StringVar(&f.MaxModelLen, "max-model-len", f.MaxModelLen, "engine max model length in tokens, overriding the probe [TOKENTAP_MAX_MODEL_LEN]")
	fs.StringVar(&f.Scenario, "scenario", f.Scenario, "YAML scenario file with the run settings; flags override it [TOKENTAP_SCENARIO]")
	fs.StringVar(&f.Out, "out", f.Out, "write the result document (JSON) here (default with --target: tokentap-run-DATE-TIME.json; the demo writes none) [TOKENTAP_OUT]")
	fs.StringVar(&f.Records, "records", f.Records, "also write every request's record here (JSONL) [TOKENTAP_RECORDS]")
	fs.StringVar(&f.Format, "format", f.Format, "report format on stdout: text, md, csv, json, html, or none [TOKENTAP_FORMAT]")
	fs.BoolVar(&f.Quiet, "quiet", f.Quiet, "no progress display on stderr [TOKENTAP_QUIET]")
	fs.StringVar(&f.Salt, "salt", f.Salt, "prompt salt (default: random per run, so reruns never hit the engine's prefix cache; a sharded run's derives from --start-at) [TOKENTAP_SALT]")
	fs.StringVar(&f.Shard, "shard", f.Shard, "run shard I of N of a sharded run, e.g. 0/3: this shard's share of every cell's requests; every shard needs the same --start-at (docs/METHOD.md §6) [TOKENTAP_SHARD]")
	fs.IntVar(&f.Shards, "shards", f.Shards, "run one of N shards, the one JOB_COMPLETION_INDEX names (a Kubernetes Indexed Job sets it) [TOKENTAP_SHARDS]")
	fs.StringVar(&f.StartAt, "start-at", f.StartAt, "a sharded run's common start, RFC 3339 (e.g. 2025-06-01T12:00:00Z), a little in the future; every window opens on a schedule from it [TOKENTAP_START_AT]")
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
	f.LogFlags.register(fs)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if *apiKey != "" {
		f.APIKey = *apiKey
	}
	_, f.PrefillSet = os.LookupEnv("TOKENTAP_PREFILL")
	fs.Visit(func(fl *flag.Flag) { f.PrefillSet = f.PrefillSet || fl.Name == "prefill" })
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tokentap matrix: unexpected argument %q (flags only; see --help)\n", fs.Arg(0))
		return 2
	}
	log, err := f.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once

	demo := f.Target == ""
	cfg := matrix.Config{
		Target: replay.Target{BaseURL: f.Target, APIKey: f.APIKey, Model: f.Model, IdleTimeout: idleTimeout(f.IdleTimeout)},
		Tool:   result.Tool{Name: "tokentap", Version: version, Commit: commit},
		Salt:   f.Salt,
		Log:    log,
		By:     f.By,
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
			fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
			return 2
		}
	case demo:
		sc = scenarios.Demo()
	default:
		sc = scenarios.Seed()
	}
	if err := applyRunFlags(&sc, &cfg, f); err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return 2
	}
	if err := sc.Validate(); err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: run settings: %v\n", err)
		return 2
	}
	if err := applyShardFlags(&cfg, f, os.Getenv("JOB_COMPLETION_INDEX")); err != nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return 2
	}
	cfg.Scenario = sc
	// A real run takes long: keep its result even when --out was not given
	// (and after Ctrl-C). The demo writes nothing unless asked.
	if f.Out == "" && !demo {
		f.Out = "tokentap-run-" + time.Now().UTC().Format("20060102-150405") + ".json"
	}

	if demo {
		eng, err := startDemoEngine()
		if err != nil {
			fmt.Fprintf(stderr, "tokentap matrix: starting the built-in fake engine: %v\n", err)
			return 1
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
		if !f.Quiet {
			fmt.Fprintf(stderr, "tokentap matrix: no --target, so this is the demo: a short matrix against the built-in fake engine at %s.\nPoint it at your engine with --target http://host:8000.\n", eng.URL())
		}
	}
	if demo || isLocal(f.Target) {
		cfg.Hardware = hardware.Override(hardware.Detect(ctx), given)
	} else {
		cfg.Hardware = given
		if cfg.Hardware != (result.Hardware{}) {
			cfg.Hardware.Source = "given"
		}
	}

	if !f.Quiet {
		cfg.Progress = stderr
		if fl, ok := stderr.(*os.File); ok && isatty.IsTerminal(fl.Fd()) {
			cfg.Terminal = true
		}
	}
	var recw *record.Writer
	if f.Records != "" {
		rf, err := os.Create(f.Records)
		if err != nil {
			fmt.Fprintf(stderr, "tokentap matrix: --records: %v\n", err)
			return 2
		}
		defer rf.Close()
		recw = record.NewWriter(rf)
		defer recw.Flush()
		cfg.OnRecords = func(recs []record.Record) {
			for i := range recs {
				if err := recw.Write(&recs[i]); err != nil {
					log.Error().Err(err).Msg("writing records")
					return
				}
			}
		}
	}

	res, err := matrix.Run(ctx, cfg)
	if res == nil {
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
		return 1
	}
	code := 0
	if err != nil {
		code = 1
		if errors.Is(err, matrix.ErrInterrupted) {
			code = 130
		}
		fmt.Fprintf(stderr, "tokentap matrix: %v\n", err)
	}
	if f.Out != "" {
		if werr := res.WriteFile(f.Out); werr != nil {
			fmt.Fprintf(stderr, "tokentap matrix: writing %s: %v\n", f.Out, werr)
			code = 1
		} else if !f.Quiet {
			fmt.Fprintf(stderr, "tokentap matrix: result written to %s (render it again with: tokentap report %s)\n", f.Out, f.Out)
		}
	}
	if f.Format != "none" {
		if rerr := report.Render(stdout, res, f.Format); rerr != nil {
			fmt.Fprintf(stderr, "tokentap matrix: report: %v\n", rerr)
			code = max(code, 1)
		}
	}
	return code
}

// applyRunFlags lays the run flags given (flag or env) over the scenario.
func applyRunFlags(sc *scenarios.Scenario, cfg *matrix.Config, f matrixFlags) error {
	var err error
	if f.Contexts != "" {
		if sc.Contexts, err = scenarios.ParseTokenList(f.Contexts); err != nil {
			return fmt.Errorf("--contexts: %w", err)
		}
	}
	if f.Concurrency != "" {
		if sc.Concurrency, err = scenarios.ParseTokenList(f.Concurrency); err != nil {
			return fmt.Errorf("--concurrency: %w", err)
		}
		for _, n := range sc.Concurrency {
			if n < 1 {
				return fmt.Errorf("--concurrency: %d: every level must be at least 1", n)
			}
		}
	}
	if f.Prefill != "" || f.PrefillSet {
		if sc.Prefill, err = scenarios.ParsePrefillList(f.Prefill); err != nil {
			return fmt.Errorf("--prefill: %w", err)
		}
	}
	if f.Window != "" {
		if sc.Window, err = time.ParseDuration(f.Window); err != nil || sc.Window <= 0 {
			return fmt.Errorf("--window %q: want a positive duration such as 30s or 2m", f.Window)
		}
	}
	if f.MaxOutput != "" {
		if sc.MaxOutput, err = scenarios.ParseTokens(f.MaxOutput); err != nil || sc.MaxOutput < 1 {
			return fmt.Errorf("--max-output %q: want a positive number of tokens", f.MaxOutput)
		}
	}
	if f.API != "" {
		a := strings.ToLower(f.API)
		if a != string(record.Chat) && a != string(record.Completions) {
			return fmt.Errorf("--api %q: use chat or completions", f.API)
		}
		sc.API = a
	}
	if f.KVCapacity != "" {
		if cfg.KVCapacity, err = scenarios.ParseTokens(f.KVCapacity); err != nil || cfg.KVCapacity < 1 {
			return fmt.Errorf("--kv-capacity %q: want a positive number of tokens", f.KVCapacity)
		}
	}
	if f.MaxModelLen != "" {
		if cfg.MaxModelLen, err = scenarios.ParseTokens(f.MaxModelLen); err != nil || cfg.MaxModelLen < 1 {
			return fmt.Errorf("--max-model-len %q: want a positive number of tokens", f.MaxModelLen)
		}
	}
	if f.Model != "" {
		sc.Model = f.Model
	}
	if len(sc.Contexts) == 0 || len(sc.Concurrency) == 0 {
		return errors.New("no decode cells: give --contexts and --concurrency (or a scenario that sets them)")
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

func startDemoEngine() (*fixtures.Engine, error) {
	fault, err := fixtures.ParseFault(demoFault)
	if err != nil {
		return nil, err
	}
	eng := fixtures.New(demoModel(), fixtures.WithFaults(fault))
	if _, err := eng.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return eng, nil
}

func demoHardware() result.Hardware {
	return result.Hardware{Type: "Simulated GPU (tokentap fake engine)", GPU: "simulated, shaped like an RTX 3060", VRAM: "12 GB (simulated)"}
}
