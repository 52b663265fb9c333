package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// LogFlags are the logging settings every long-running command shares.
// Embed it (exported, so caarlos0/env sees it) in a command's config struct.
type LogFlags struct {
	Level string `env:"LOG_LEVEL" envDefault:"warn"`
	JSON  bool   `env:"LOG_JSON"`
}

// loadEnv fills cfg (a pointer to a struct with `env` tags) from TOKENTAP_*
// variables. Call it before defining flags so the env values become the flag
// defaults and flags given on the command line win.
func loadEnv(cfg any) error {
	err := env.ParseWithOptions(cfg, env.Options{Prefix: "TOKENTAP_"})
	if err == nil {
		return nil
	}
	// The library names the struct field; users set variables, so name those.
	keys := envKeys(reflect.TypeOf(cfg), "TOKENTAP_")
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return fmt.Errorf("environment: %w", err)
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) && keys[pe.Name] != "" {
			msgs = append(msgs, fmt.Sprintf("%s: %v", keys[pe.Name], pe.Err))
			continue
		}
		msgs = append(msgs, e.Error())
	}
	return fmt.Errorf("bad environment variable: %s", strings.Join(msgs, "; "))
}

// envKeys maps field names of a config struct (and of nested structs with
// envPrefix) to their environment variable names.
func envKeys(t reflect.Type, prefix string) map[string]string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	keys := map[string]string{}
	if t.Kind() != reflect.Struct {
		return keys
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if p, ok := f.Tag.Lookup("envPrefix"); ok {
			for k, v := range envKeys(f.Type, prefix+p) {
				keys[k] = v
			}
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("env"), ","); tag != "" {
			keys[f.Name] = prefix + tag
		} else if f.Type.Kind() == reflect.Struct {
			for k, v := range envKeys(f.Type, prefix) { // embedded or nested without a prefix
				keys[k] = v
			}
		}
	}
	return keys
}

func newFlagSet(name, summary string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tokentap %s [flags]\n\n%s\n\nFlags (environment variable in brackets; flags win):\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; done is true when the command should exit now with
// code (after --help: 0; after a bad flag: 2, with the error and usage shown).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0, true
	}
	if err != nil {
		return 2, true
	}
	return 0, false
}

// parseArgs parses args like parseFlags but lets flags and positional
// arguments come in any order ("report run.json --format md" as well as
// "report --format md run.json"); it returns the positional ones in order.
func parseArgs(fs *flag.FlagSet, args []string) (positional []string, code int, done bool) {
	for {
		if code, done := parseFlags(fs, args); done {
			return nil, code, true
		}
		if fs.NArg() == 0 {
			return positional, 0, false
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (l *LogFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.Level, "log-level", l.Level, "log level: debug, info, warn, error [TOKENTAP_LOG_LEVEL]")
	fs.BoolVar(&l.JSON, "log-json", l.JSON, "log JSON lines even on a terminal [TOKENTAP_LOG_JSON]")
}

// logger builds the zerolog logger: human-readable on a terminal, JSON
// otherwise, to stderr; quiet (warn) by default.
func (l *LogFlags) logger(stderr io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(l.Level))
	if err != nil || l.Level == "" {
		return zerolog.Nop(), fmt.Errorf("unknown log level %q (use debug, info, warn or error)", l.Level)
	}
	var w io.Writer = stderr
	if f, ok := stderr.(*os.File); ok && !l.JSON && isatty.IsTerminal(f.Fd()) {
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// idleTimeout turns the --idle-timeout flag (0: never) into
// replay.Target.IdleTimeout (0: the default, negative: never).
func idleTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
