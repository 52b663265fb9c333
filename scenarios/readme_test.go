package scenarios

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestReadmeExampleParses keeps the README's scenario example true: the
// first yaml block of README.md must load and mean what it says.
func TestReadmeExampleParses(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("README.md has no yaml example")
	}
	doc, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md's yaml example is not closed")
	}
	sc, err := Parse([]byte(doc), "README.md")
	if err != nil {
		t.Fatalf("README example does not load: %v", err)
	}
	if sc.Name != "qwen-long-context" || sc.Window != 30*time.Second || len(sc.Contexts) != 4 || sc.Contexts[1] != 16384 {
		t.Fatalf("README example read as %+v", sc)
	}
}
