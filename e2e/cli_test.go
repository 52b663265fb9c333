//go:build e2e

// Package e2e runs the built tokentap binary the way a user does. It needs
// TOKENTAP_BIN (set by `make e2e`).
package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func bin(t *testing.T) string {
	t.Helper()
	b := os.Getenv("TOKENTAP_BIN")
	if b == "" {
		t.Fatal("TOKENTAP_BIN is not set: run these tests with `make e2e`")
	}
	return b
}

func TestVersionIsStamped(t *testing.T) {
	out, err := exec.Command(bin(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("tokentap version: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.HasPrefix(s, "tokentap ") || strings.Contains(s, "commit unknown") || strings.Contains(s, "built unknown") {
		t.Fatalf("version not stamped by make build: %q", s)
	}
}

func TestUnknownCommandAndFlagFail(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"version", "--no-such-flag"}} {
		cmd := exec.Command(bin(t), args...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("tokentap %v succeeded; want a non-zero exit", args)
		}
		if len(out) == 0 {
			t.Fatalf("tokentap %v failed silently", args)
		}
	}
}
