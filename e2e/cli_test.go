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

// TestReadmeCommands keeps the README's promise: its first two commands are
// the demo matrix and the test command, and .ci/run runs exactly the latter.
func TestReadmeCommands(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\n")
	if !ok {
		t.Fatal("README.md has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, line := range strings.Split(block, "\n") {
		if cmd, _, _ := strings.Cut(line, "#"); strings.TrimSpace(cmd) != "" {
			cmds = append(cmds, strings.TrimSpace(cmd))
		}
	}
	if len(cmds) != 2 || cmds[0] != "go run ./cmd/tokentap matrix" || cmds[1] != "make test" {
		t.Fatalf("README's first commands are %q; want the demo matrix and make test", cmds)
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, line := range strings.Split(string(ci), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "set ") && !strings.HasPrefix(l, "cd ") {
			run = append(run, l)
		}
	}
	if len(run) != 1 || run[0] != cmds[1] {
		t.Fatalf(".ci/run runs %q, want exactly %q", run, cmds[1])
	}
}
