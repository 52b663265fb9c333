package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/tokentap/tokentap/scenarios"
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
	err := env.ParseWithOptions(cfg, env.Options{Prefix: "TOKENTAP_", FuncMap: map[reflect.Type]env.ParserFunc{
		reflect.TypeFor[bool]():          parseBoolEnv,
		reflect.TypeFor[time.Duration](): parseDurationEnv,
	}})
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

// parseBoolEnv reads a TOKENTAP_* switch: true/false, yes/no, on/off, 1/0.
func parseBoolEnv(v string) (any, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "yes", "y", "on":
		return true, nil
	case "", "0", "f", "false", "no", "n", "off":
		return false, nil
	}
	return nil, fmt.Errorf("%q: want true or false (yes/no, on/off and 1/0 work too)", v)
}

// parseDurationEnv reads a TOKENTAP_* duration as its flag does.
func parseDurationEnv(v string) (any, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return nil, fmt.Errorf("%q: want a duration with its unit, such as 30s, 10m or 1h", v)
	}
	return d, nil
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

// Exit codes, the same for every command; README and every --help list them.
const (
	exitOK          = 0   // the command did what it was asked
	exitError       = 1   // it failed while running (a file could not be written, the engine broke off the run)
	exitUsage       = 2   // a flag, variable, argument or input file is wrong, or the settings fit nothing the engine runs; nothing was sent
	exitFailed      = 3   // the run finished, but cells (or replayed requests) failed; --allow-failed exits 0
	exitEngine      = 4   // the engine could not be reached, refused access, or is not an OpenAI-compatible API; nothing was sent
	exitInterrupted = 130 // Ctrl-C or SIGTERM; what was finished is kept
)

// exitCodesHelp ends every command's --help and the top-level usage.
const exitCodesHelp = `Exit codes:
  0    done: the run measured what it was asked to
  1    an error while running (a file could not be written, the engine broke off the run)
  2    usage: a flag, variable, argument or input file is wrong, or the settings ask for
       nothing the engine can run (a model it does not serve, no cell that fits); nothing was sent
  3    cells failed (matrix), or more replayed requests failed than in the capture (replay);
       --allow-failed exits 0 instead
  4    the engine could not be reached, refused access, or is not an OpenAI-compatible API;
       nothing was sent
  130  interrupted (Ctrl-C, SIGTERM); what was finished is kept
`

// cli is one command's flag set: --help goes to stdout, mistakes to stderr
// in a line or two (with the nearest flag for a typo), and errors about a
// value name where it came from (the flag or its TOKENTAP_* variable).
type cli struct {
	*flag.FlagSet
	name, summary  string
	stdout, stderr io.Writer
}

func newCLI(name, summary string, stdout, stderr io.Writer) *cli {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors itself
	fs.Usage = func() {}
	return &cli{FlagSet: fs, name: name, summary: summary, stdout: stdout, stderr: stderr}
}

// usage writes the command's help to w.
func (c *cli) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: tokentap %s [flags]\n\n%s\n\nFlags (environment variable in brackets; flags win):\n", c.name, c.summary)
	c.SetOutput(w)
	c.PrintDefaults()
	c.SetOutput(io.Discard)
	fmt.Fprintf(w, "\n%s", exitCodesHelp)
}

// parse parses args; done is true when the command should exit now with
// code: after --help (help on stdout) 0, after a bad flag 2 (a short
// message on stderr: what was wrong, the nearest flag, where help is).
func (c *cli) parse(args []string) (code int, done bool) {
	err := c.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		c.usage(c.stdout)
		return exitOK, true
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "tokentap %s: %s (tokentap %s --help lists every flag)\n", c.name, c.flagError(err), c.name)
		return exitUsage, true
	}
	return exitOK, false
}

// flagError rewords the flag package's errors: "-windw" becomes "unknown
// flag --windw; did you mean --window?".
func (c *cli) flagError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		out := "unknown flag --" + name
		if s := c.nearest(name); s != "" {
			out += "; did you mean --" + s + "?"
		}
		return out
	}
	if rest, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "--" + rest + " needs a value"
	}
	// invalid value "x" for flag -idle-timeout: parse error
	// invalid boolean value "x" for -quiet: parse error
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		why := friendlyParseError(m[4])
		if m[1] != "" {
			why = "want true or false"
		}
		return fmt.Sprintf("--%s %s: %s", m[3], m[2], why)
	}
	return msg
}

var invalidValue = regexp.MustCompile(`^invalid (boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)

// friendlyParseError says what the flag package's terse reasons mean.
func friendlyParseError(why string) string {
	switch why {
	case "parse error":
		return "not a value of the right kind (durations look like 30s or 10m, numbers like 4)"
	case "value out of range":
		return "out of range"
	}
	return why
}

// nearest is the defined flag closest to name, or "" when none is near.
func (c *cli) nearest(name string) string {
	best, bestD := "", 3
	c.VisitAll(func(f *flag.Flag) {
		d := scenarios.Distance(strings.ToLower(name), f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		if d < bestD || (d == bestD && best != "" && f.Name < best) {
			best, bestD = f.Name, d
		}
	})
	return best
}

// parseArgs parses args like parse but lets flags and positional
// arguments come in any order ("report run.json --format md" as well as
// "report --format md run.json"); it returns the positional ones in order.
func (c *cli) parseArgs(args []string) (positional []string, code int, done bool) {
	for {
		if code, done := c.parse(args); done {
			return nil, code, true
		}
		if c.NArg() == 0 {
			return positional, exitOK, false
		}
		positional = append(positional, c.Arg(0))
		args = c.Args()[1:]
	}
}

// given reports whether flag name was on the command line.
func (c *cli) given(name string) bool {
	set := false
	c.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

var envInUsage = regexp.MustCompile(`\[(TOKENTAP_[A-Z0-9_]+)`)

// source names where flag name's value came from, for an error about it:
// "--window" when given on the command line (or not at all), else the
// TOKENTAP_* variable that set it.
func (c *cli) source(name string) string {
	dash := "--"
	if len(name) == 1 {
		dash = "-" // -o
	}
	f := c.Lookup(name)
	if f == nil || c.given(name) {
		return dash + name
	}
	if m := envInUsage.FindStringSubmatch(f.Usage); m != nil {
		if _, ok := os.LookupEnv(m[1]); ok {
			return m[1]
		}
	}
	return dash + name
}

func (l *LogFlags) register(fs *cli) {
	fs.StringVar(&l.Level, "log-level", l.Level, "log level: debug, info, warn, error [TOKENTAP_LOG_LEVEL]")
	fs.BoolVar(&l.JSON, "log-json", l.JSON, "log JSON lines even on a terminal [TOKENTAP_LOG_JSON]")
}

// logger builds the zerolog logger: human-readable on a terminal, JSON
// otherwise, to stderr; quiet (warn) by default.
func (l *LogFlags) logger(stderr io.Writer) (zerolog.Logger, error) {
	return l.loggerBeside(stderr, false)
}

// loggerBeside is logger for a command whose progress lines go to stderr
// too (progress true): there a log line is a text line like them, on a
// terminal or not (a JSON object among progress lines in a file reads as
// noise), unless --log-json asks for JSON.
func (l *LogFlags) loggerBeside(stderr io.Writer, progress bool) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(l.Level))
	if err != nil || l.Level == "" {
		return zerolog.Nop(), fmt.Errorf("unknown log level %q (use debug, info, warn or error)", l.Level)
	}
	var w io.Writer = stderr
	f, isFile := stderr.(*os.File)
	switch {
	case l.JSON:
	case isFile && isatty.IsTerminal(f.Fd()):
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05.000"}
	case progress:
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05.000", NoColor: true}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// checkIdleTimeout refuses a negative --idle-timeout (it was taken as
// "never", which 0 already says).
func checkIdleTimeout(d time.Duration, source string) error {
	if d < 0 {
		return fmt.Errorf("%s %v: give a positive duration such as 10m, or 0 to wait for ever", source, d)
	}
	return nil
}

// idleTimeout turns the --idle-timeout flag (0: never) into
// replay.Target.IdleTimeout (0: the default, negative: never).
func idleTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// cutOnSignal calls cancel when a second Ctrl-C (or SIGTERM) comes before
// ctx ends: a shutdown that waits for open requests can be cut at once.
// The returned function stops listening.
func cutOnSignal(ctx context.Context, cancel context.CancelFunc) (stop func()) {
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-again:
			cancel()
		case <-ctx.Done():
		case <-done:
		}
	}()
	return func() {
		signal.Stop(again)
		close(done)
	}
}

// checkListen refuses an address to listen on that is not host:port
// before anything starts (a usage error, exit 2), with the address it
// probably meant: a bare port 8080 is 127.0.0.1:8080 (this machine) or
// :8080 (every address).
func checkListen(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		if n, aerr := strconv.Atoi(addr); aerr == nil && n >= 0 && n <= 65535 {
			return fmt.Errorf("%s %s: want host:port, e.g. 127.0.0.1:%d (this machine only) or :%d (every address)", flag, addr, n, n)
		}
		return fmt.Errorf("%s %q: want host:port, e.g. 127.0.0.1:8080: %v", flag, addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		if _, lerr := net.LookupPort("tcp", port); lerr != nil {
			return fmt.Errorf("%s %q: port %q is not a port number (0 to 65535)", flag, addr, port)
		}
	}
	return nil
}
