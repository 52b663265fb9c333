package main

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"1024", 1024, true},
		{"128M", 128 << 20, true},
		{"64MiB", 64 << 20, true},
		{"2g", 2 << 30, true},
		{"16k", 16 << 10, true},
		{"0", 0, false},
		{"-5M", 0, false},
		{"lots", 0, false},
	}
	for _, tt := range tests {
		got, err := parseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestProxyFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no upstream", nil, nil, "--upstream is required"},
		{"bad upstream", []string{"--upstream", "ftp://x"}, nil, "is not an http(s) URL of an engine"},
		{"bad size flag", []string{"--upstream", "http://127.0.0.1:1", "--max-body-size", "huge"}, nil, "size \"huge\""},
		{"bad size env", []string{"--upstream", "http://127.0.0.1:1"}, map[string]string{"TOKENTAP_MAX_BODY_SIZE": "huge"}, "TOKENTAP_MAX_BODY_SIZE"},
		{"negative procs", []string{"--upstream", "http://127.0.0.1:1", "--procs", "-1"}, nil, "--procs -1"},
		{"bad procs env", []string{"--upstream", "http://127.0.0.1:1"}, map[string]string{"TOKENTAP_PROCS": "many"}, "TOKENTAP_PROCS"},
		// A bare port is not an address to listen on: a usage error, with
		// the host:port it probably meant (it exited 1 "missing port").
		{"bare port", []string{"--upstream", "http://127.0.0.1:1", "--listen", "24014"}, nil, "--listen 24014: want host:port, e.g. 127.0.0.1:24014"},
		{"bare port env", []string{"--upstream", "http://127.0.0.1:1"}, map[string]string{"TOKENTAP_LISTEN": "24014"}, "TOKENTAP_LISTEN 24014: want host:port"},
		{"admin bare port", []string{"--upstream", "http://127.0.0.1:1", "--admin", "8081"}, nil, "--admin 8081: want host:port, e.g. 127.0.0.1:8081"},
		{"listen no port", []string{"--upstream", "http://127.0.0.1:1", "--listen", "localhost"}, nil, `--listen "localhost": want host:port`},
		{"listen bad port", []string{"--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:99999"}, nil, "is not a port number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			if code := run(append([]string{"proxy"}, tt.args...), &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("stderr %q lacks %q", errb.String(), tt.want)
			}
		})
	}
}

func TestSetProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	tests := []struct {
		name string
		n    int
		env  string // GOMAXPROCS, "" for unset
		want int
	}{
		{"default is one", 0, "", 1},
		{"flag wins", 3, "", 3},
		{"flag wins over env", 2, "5", 2},
		{"env kept when no flag", 0, "4", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("GOMAXPROCS", tt.env)
				runtime.GOMAXPROCS(4) // what the runtime took from the env at start
			} else {
				t.Setenv("GOMAXPROCS", "")
				os.Unsetenv("GOMAXPROCS")
				runtime.GOMAXPROCS(4)
			}
			setProcs(tt.n)
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Fatalf("GOMAXPROCS = %d, want %d", got, tt.want)
			}
		})
	}
}
