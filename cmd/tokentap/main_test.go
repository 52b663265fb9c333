package main

import (
	"bytes"
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
		{name: "unknown flag", args: []string{"version", "--bogus"}, code: 2, stderr: "flag provided but not defined: -bogus", noStdout: true},
		{name: "subcommand help", args: []string{"version", "--help"}, code: 0, stderr: "Usage: tokentap version"},
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
			fs := newFlagSet("x", "test", &errb)
			lf.register(fs)
			if code, done := parseFlags(fs, tt.args); done {
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
		fs := newFlagSet("x", "test", &errb)
		format := fs.String("format", "text", "")
		files, _, done := parseArgs(fs, tt.args)
		if done != tt.done || strings.Join(files, ",") != strings.Join(tt.files, ",") || *format != tt.fmt {
			t.Errorf("%q: files %q format %q done %v; want %q %q %v", tt.args, files, *format, done, tt.files, tt.fmt, tt.done)
		}
	}
}
