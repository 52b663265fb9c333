package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tokentap/tokentap/matrix"
	"github.com/tokentap/tokentap/scenarios"
)

// TestMatrixAPIKey: the key comes from TOKENTAP_API_KEY or --api-key (the
// flag wins), reaches the engine as a Bearer token, and never shows in
// tokentap's output, --help included.
func TestMatrixAPIKey(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized) // stop the probe at once
	}))
	defer srv.Close()
	tests := []struct {
		name, env string
		args      []string
		want      string
	}{
		{name: "env", env: "env-sekrit", args: nil, want: "Bearer env-sekrit"},
		{name: "flag wins", env: "env-sekrit", args: []string{"--api-key", "flag-sekrit"}, want: "Bearer flag-sekrit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TOKENTAP_API_KEY", tt.env)
			mu.Lock()
			got = nil
			mu.Unlock()
			var out, errb bytes.Buffer
			args := append([]string{"matrix", "--target", srv.URL, "--quiet"}, tt.args...)
			if code := run(args, &out, &errb); code == 0 {
				t.Fatal("a 401 from the engine exited 0")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) == 0 || got[0] != tt.want {
				t.Fatalf("Authorization %q, want %q", got, tt.want)
			}
			all := out.String() + errb.String()
			if strings.Contains(all, "sekrit") {
				t.Errorf("the key leaked into the output:\n%s", all)
			}
			if !strings.Contains(strings.ToLower(all), "key") && !strings.Contains(all, "401") {
				t.Errorf("the refusal is not explained:\n%s", all)
			}
		})
	}
	t.Setenv("TOKENTAP_API_KEY", "env-sekrit")
	var out, errb bytes.Buffer
	run([]string{"matrix", "--help"}, &out, &errb)
	if strings.Contains(out.String()+errb.String(), "sekrit") {
		t.Error("--help shows the key from the environment")
	}
}

// TestMatrixBadFlags: bad run settings stop before anything is started.
func TestMatrixBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "0s"},
		{"--window", "soon"},
		{"--concurrency", "0"},
		{"--contexts", "16q"},
		{"--api", "grpc"},
		{"--max-output", "0"},
		{"--kv-capacity", "-5"},
		{"extra-arg"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"matrix"}, args...), &out, &errb); code != 2 {
			t.Errorf("matrix %v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
		if errb.Len() == 0 {
			t.Errorf("matrix %v failed silently", args)
		}
	}
}

// TestReplayUsage: replay needs a target and exactly one capture.
func TestReplayUsage(t *testing.T) {
	for _, args := range [][]string{
		{"capture.jsonl"},
		{"--target", "http://127.0.0.1:1"},
		{"--target", "http://127.0.0.1:1", "a.jsonl", "b.jsonl"},
		{"--target", "http://127.0.0.1:1", "--speed", "0", "a.jsonl"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"replay"}, args...), &out, &errb); code != 2 {
			t.Errorf("replay %v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

// TestPrefillNone: --prefill none, and --prefill given empty, leave no
// prefill rows; a list replaces the scenario's.
func TestPrefillNone(t *testing.T) {
	for _, tt := range []struct {
		prefill string
		set     bool
		want    int
	}{
		{"none", true, 0},
		{"NONE", true, 0},
		{"", true, 0},
		{"", false, 5}, // not given: the seed's five rows
		{"8k,16k", true, 2},
	} {
		sc := scenarios.Seed()
		var cfg matrix.Config
		f := matrixFlags{Prefill: tt.prefill, PrefillSet: tt.set}
		if err := applyRunFlags(&sc, &cfg, f); err != nil {
			t.Fatalf("--prefill %q: %v", tt.prefill, err)
		}
		if len(sc.Prefill) != tt.want {
			t.Errorf("--prefill %q (given %v): %d rows %v, want %d", tt.prefill, tt.set, len(sc.Prefill), sc.Prefill, tt.want)
		}
	}
}
