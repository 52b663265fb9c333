package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestDispatch(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string
		stderr   string
		noStdout bool
	}{
		{name: "no args shows usage on stderr", args: nil, code: 2, stderr: "Usage:", noStdout: true},
		{name: "help on stdout", args: []string{"--help"}, code: 0, stdout: "Commands:"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`, noStdout: true},
		{name: "version", args: []string{"version"}, code: 0, stdout: "tokentap dev"},
		{name: "version flag", args: []string{"--version"}, code: 0, stdout: "tokentap dev"},
		{name: "unknown flag", args: []string{"version", "--bogus"}, code: 2, stderr: "unknown flag --bogus", noStdout: true},
		{name: "subcommand help on stdout", args: []string{"version", "--help"}, code: 0, stdout: "Usage: tokentap version"},
		{name: "help for a command", args: []string{"help", "matrix"}, code: 0, stdout: "Usage: tokentap matrix"},
		{name: "help lists exit codes", args: []string{"help"}, code: 0, stdout: "Exit codes:"},
		{name: "typo'd command", args: []string{"matirx"}, code: 2, stderr: `did you mean "matrix"?`, noStdout: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, errb.String())
			}
			if tt.stdout != "" && !strings.Contains(out.String(), tt.stdout) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.stdout)
			}
			if tt.stderr != "" && !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.stderr)
			}
			if tt.noStdout && out.Len() > 0 {
				t.Errorf("stdout should stay empty for errors, got %q", out.String())
			}
		})
	}
}

// TestEnvThenFlags checks the precedence every command relies on: defaults,
// then TOKENTAP_* variables, then flags.
func TestEnvThenFlags(t *testing.T) {
	tests := []struct {
		name  string
		env   string
		args  []string
		level string
	}{
		{name: "default", level: "warn"},
		{name: "env", env: "debug", level: "debug"},
		{name: "flag beats env", env: "debug", args: []string{"--log-level", "error"}, level: "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("TOKENTAP_LOG_LEVEL", tt.env)
			}
			var lf LogFlags
			if err := loadEnv(&lf); err != nil {
				t.Fatal(err)
			}
			var errb bytes.Buffer
			fs := newCLI("x", "test", &errb, &errb)
			lf.register(fs)
			if code, done := fs.parse(tt.args); done {
				t.Fatalf("parse stopped with %d: %s", code, errb.String())
			}
			if lf.Level != tt.level {
				t.Fatalf("level %q, want %q", lf.Level, tt.level)
			}
			if _, err := lf.logger(&errb); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBadLogLevel(t *testing.T) {
	lf := LogFlags{Level: "loud"}
	if _, err := lf.logger(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "debug, info, warn or error") {
		t.Fatalf("want a clear error for an unknown level, got %v", err)
	}
}

// TestHelpOnStdout: every command's --help goes to stdout (so | grep
// works), lists its flags and the exit codes, and exits 0.
func TestHelpOnStdout(t *testing.T) {
	for _, c := range commands() {
		var out, errb bytes.Buffer
		if code := run([]string{c.name, "--help"}, &out, &errb); code != 0 {
			t.Errorf("%s --help: exit %d", c.name, code)
		}
		if errb.Len() > 0 || !strings.Contains(out.String(), "Usage: tokentap "+c.name) || !strings.Contains(out.String(), "Exit codes:") {
			t.Errorf("%s --help: stdout %.200q, stderr %q", c.name, out.String(), errb.String())
		}
	}
	var out bytes.Buffer
	run([]string{"matrix", "-h"}, &out, &out)
	if !strings.Contains(out.String(), "-window") || !strings.Contains(out.String(), "-allow-failed") {
		t.Errorf("matrix -h lacks its flags:\n%s", out.String())
	}
}

// TestFlagTypos: a mistyped flag gets one line naming the nearest flag,
// not the whole usage.
func TestFlagTypos(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"matrix", "--windw", "2s"}, "unknown flag --windw; did you mean --window?"},
		{[]string{"matrix", "--concurency", "4"}, "did you mean --concurrency?"},
		{[]string{"report", "--fromat", "md"}, "did you mean --format?"},
		{[]string{"proxy", "--upstrem", "x"}, "did you mean --upstream?"},
		{[]string{"matrix", "--idle-timeout", "soon"}, `--idle-timeout "soon": not a value of the right kind`},
		{[]string{"matrix", "--quiet=perhaps"}, `--quiet "perhaps"`},
		{[]string{"matrix", "--target"}, "--target needs a value"},
		{[]string{"matrix", "--xyzzy"}, "unknown flag --xyzzy (tokentap matrix --help"},
	} {
		var out, errb bytes.Buffer
		code := run(tt.args, &out, &errb)
		msg := errb.String()
		if code != 2 || !strings.Contains(msg, tt.want) || strings.Count(msg, "\n") > 2 || out.Len() > 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a short message with %q", tt.args, code, msg, tt.want)
		}
	}
}

// TestVersionFromBuildInfo: without the Makefile's stamps, version,
// commit and date come from what Go embeds in the binary.
func TestVersionFromBuildInfo(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
		for i := 0; i+1 < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	for _, tt := range []struct {
		name                  string
		version, commit, date string
		info                  *debug.BuildInfo
		want                  string
	}{
		{"make build stamps win", "v1.2.0", "abc1234", "2026-12-01T10:00:00Z", vcs("vcs.revision", "ffffffffffffffff"),
			"tokentap v1.2.0 (commit abc1234, built 2026-12-01T10:00:00Z)"},
		{"go build in a checkout", "dev", "", "", vcs("vcs.revision", "0123456789abcdef0123", "vcs.time", "2026-12-01T09:00:00Z", "vcs.modified", "false"),
			"tokentap dev (commit 0123456789ab, built 2026-12-01T09:00:00Z (commit time))"},
		{"uncommitted changes", "dev", "", "", vcs("vcs.revision", "0123456789abcdef", "vcs.modified", "true"),
			"tokentap dev (commit 0123456789ab+dirty, built unknown)"},
		{"go install at a version", "dev", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1"}},
			"tokentap v0.3.1 (commit unknown, built unknown)"},
		{"nothing known says why", "dev", "", "", nil, "tokentap dev (commit unknown, built unknown); not stamped: go run, GOFLAGS=-buildvcs=false or a git worktree leave Go nothing to embed, make build stamps all three"},
	} {
		if got := versionLine(tt.version, tt.commit, tt.date, tt.info); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestEnvValuesNamed: a bad value from a variable names the variable,
// one from a flag the flag; switches take yes/no too.
func TestEnvValuesNamed(t *testing.T) {
	for _, tt := range []struct {
		env       map[string]string
		args      []string
		want, not string
	}{
		{map[string]string{"TOKENTAP_WINDOW": "10"}, nil, "TOKENTAP_WINDOW", "--window"},
		{nil, []string{"--window", "10"}, "--window", "TOKENTAP_WINDOW"},
		{map[string]string{"TOKENTAP_WINDOW": "10"}, []string{"--window", "10"}, "--window", "TOKENTAP_WINDOW"},
		{map[string]string{"TOKENTAP_CONCURRENCY": "1,-2"}, nil, "TOKENTAP_CONCURRENCY: list \"1,-2\": item 2 (-2) is below 1", "token count"},
		{nil, []string{"--concurrency", "1,-2"}, "--concurrency: list \"1,-2\": item 2 (-2) is below 1", "token count"},
		{map[string]string{"TOKENTAP_QUIET": "maybe"}, nil, `TOKENTAP_QUIET: "maybe": want true or false`, "strconv"},
		{map[string]string{"TOKENTAP_IDLE_TIMEOUT": "10"}, nil, `TOKENTAP_IDLE_TIMEOUT: "10": want a duration with its unit`, "time:"},
		{map[string]string{"TOKENTAP_PERCENTILES": "50,101"}, nil, "TOKENTAP_PERCENTILES", ""},
		{map[string]string{"TOKENTAP_FORMAT": "pdf"}, nil, "TOKENTAP_FORMAT: unknown report format", ""},
	} {
		t.Run(strings.Join(tt.args, " ")+fmt.Sprint(tt.env), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			code := run(append([]string{"matrix", "--target", "http://127.0.0.1:1", "--quiet"}, tt.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tt.want) || (tt.not != "" && strings.Contains(errb.String(), tt.not)) {
				t.Errorf("exit %d, stderr %q; want 2 naming %q, not %q", code, errb.String(), tt.want, tt.not)
			}
		})
	}
	t.Setenv("TOKENTAP_QUIET", "yes")
	var f matrixFlags
	if err := loadEnv(&f); err != nil || !f.Quiet {
		t.Errorf("TOKENTAP_QUIET=yes: quiet %v, %v", f.Quiet, err)
	}
}

func TestBadEnvIsReported(t *testing.T) {
	t.Setenv("TOKENTAP_LOG_JSON", "maybe")
	var lf LogFlags
	err := loadEnv(&lf)
	if err == nil || !strings.Contains(err.Error(), "LOG_JSON") {
		t.Fatalf("want an error naming TOKENTAP_LOG_JSON, got %v", err)
	}
}

func TestBadEnvInEmbeddedConfig(t *testing.T) {
	type cfg struct {
		LogFlags
		Window string `env:"WINDOW"`
	}
	t.Setenv("TOKENTAP_LOG_JSON", "perhaps")
	var c cfg
	err := loadEnv(&c)
	if err == nil || !strings.Contains(err.Error(), "TOKENTAP_LOG_JSON") {
		t.Fatalf("want an error naming TOKENTAP_LOG_JSON, got %v", err)
	}
}

func TestIdleTimeoutFlag(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{0: -1, -time.Second: -1, 90 * time.Second: 90 * time.Second} {
		if got := idleTimeout(in); got != want {
			t.Errorf("idleTimeout(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestParseArgsInterspersed(t *testing.T) {
	tests := []struct {
		args  []string
		files []string
		fmt   string
		done  bool
	}{
		{[]string{"a.json", "--format", "md", "b.json"}, []string{"a.json", "b.json"}, "md", false},
		{[]string{"--format", "csv", "a.json"}, []string{"a.json"}, "csv", false},
		{[]string{"a.json"}, []string{"a.json"}, "text", false},
		{[]string{"a.json", "--bogus"}, nil, "text", true},
	}
	for _, tt := range tests {
		var errb bytes.Buffer
		fs := newCLI("x", "test", &errb, &errb)
		format := fs.String("format", "text", "")
		files, _, done := fs.parseArgs(tt.args)
		if done != tt.done || strings.Join(files, ",") != strings.Join(tt.files, ",") || *format != tt.fmt {
			t.Errorf("%q: files %q format %q done %v; want %q %q %v", tt.args, files, *format, done, tt.files, tt.fmt, tt.done)
		}
	}
}

// TestHelpValueNames: a flag's help line names its value by its kind
// (string, int, duration …). Backticks in a usage text make the flag
// package take the quoted word as the value's name, so a switch read as a
// flag taking a value ("-strict-model x").
func TestHelpValueNames(t *testing.T) {
	kinds := map[string]bool{"string": true, "int": true, "int64": true, "uint": true, "uint64": true, "float": true, "duration": true, "value": true}
	for _, c := range commands() {
		var out bytes.Buffer
		if code := run([]string{c.name, "--help"}, &out, io.Discard); code != 0 {
			t.Fatalf("%s --help: exit %d", c.name, code)
		}
		for _, line := range strings.Split(out.String(), "\n") {
			f := strings.Fields(line)
			if strings.HasPrefix(line, "  -") && len(f) > 1 && !kinds[f[1]] {
				t.Errorf("%s --help: %q names its value %q (a backtick in its usage?)", c.name, strings.TrimSpace(line), f[1])
			}
		}
	}
}

// TestLogBesideProgress: where stderr is a file (not a terminal), a
// command's log lines among its progress lines are text lines like them;
// JSON where there is no progress, or when --log-json asks for it.
func TestLogBesideProgress(t *testing.T) {
	for _, tt := range []struct {
		name     string
		progress bool
		json     bool
		wantJSON bool
	}{
		{"beside progress", true, false, false},
		{"beside progress, --log-json", true, true, true},
		{"no progress", false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			lf := LogFlags{Level: "warn", JSON: tt.json}
			log, err := lf.loggerBeside(f, tt.progress)
			if err != nil {
				t.Fatal(err)
			}
			log.Warn().Str("why", "gone").Msg("matrix: scraping the engine's gauges failed")
			b, _ := os.ReadFile(f.Name())
			line := strings.TrimSpace(string(b))
			if isJSON := strings.HasPrefix(line, "{"); isJSON != tt.wantJSON || !strings.Contains(line, "scraping the engine's gauges failed") {
				t.Errorf("log line %q; want JSON %v", line, tt.wantJSON)
			}
			if !tt.wantJSON && strings.Contains(line, "\x1b[") {
				t.Errorf("log line %q: colours in a file", line)
			}
		})
	}
}
