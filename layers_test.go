package tokentap_test

import (
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path every package of tokentap starts with.
const module = "github.com/tokentap/tokentap"

// buildTags are the build tags some packages hide behind (ARCHITECTURE.md):
// with all of them every package and file is listed.
const buildTags = "e2e,live,wire,soak,fuzzproxy,peers"

// impure are what the base types and the pure arithmetic (layers 1 and 2)
// do not import: the network's protocols, processes, system calls.
// A path here stands for the packages below it too (net/http/httptest).
var impure = []string{"net/http", "net/url", "net/rpc", "net/smtp", "os/exec", "os/signal", "syscall", "golang.org/x/sys", "github.com/valyala/fasthttp", "github.com/prometheus"}

// TestPackageLayers holds every package's imports (go list) to the layers
// ARCHITECTURE.md's Layers table gives: a package imports packages of its
// own layer or lower ones, a test helper (all of internal/test/ among
// them) only tests import, layers 1 and 2 touch no network protocol,
// process or system call, and every package is in the table.
func TestPackageLayers(t *testing.T) {
	layerOf := readLayers(t)
	out, err := exec.Command("go", "list", "-tags", buildTags, "-json=ImportPath,Dir,GoFiles,IgnoredGoFiles,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for {
		var lp listed
		if err := dec.Decode(&lp); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(lp.ImportPath, module), "/")
		// go list gives the imports of the files this machine builds;
		// those for another system, architecture or the race detector
		// (evloop_other.go, race.go) are held to the layers too.
		imports, others := lp.Imports, 0
		for _, name := range lp.IgnoredGoFiles {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(lp.Dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			others++
			for _, is := range f.Imports {
				if imp, _ := strconv.Unquote(is.Path.Value); !slices.Contains(imports, imp) {
					imports = append(imports, imp)
				}
			}
		}
		if len(lp.GoFiles)+others == 0 {
			continue // tests only (this one, e2e, live): their imports are tests'
		}
		from, ok := layerOf[pkg]
		if !ok {
			t.Errorf("package %s is in no layer of ARCHITECTURE.md's Layers table: give it one", pkg)
			continue
		}
		if strings.HasPrefix(pkg, "internal/test/") && !from.test {
			t.Errorf("package %s is under internal/test/, the helpers for tests, but in layer %s: move it out, or into the tests row", pkg, from.name)
		}
		checked++
		for _, imp := range imports {
			if from.n <= 2 && slices.ContainsFunc(impure, func(p string) bool { return imp == p || strings.HasPrefix(imp, p+"/") }) {
				t.Errorf("%s (layer %d, %s) imports %s: I/O belongs to layer 3", pkg, from.n, from.name, imp)
			}
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			to, ok := layerOf[dep]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is in no layer of ARCHITECTURE.md", pkg, dep)
			case to.test && !from.test:
				t.Errorf("%s (layer %s) imports %s, a helper for tests only", pkg, from.name, dep)
			case !to.test && to.n > from.n:
				t.Errorf("%s (layer %d, %s) imports %s (layer %d, %s): imports go down the layers, never up", pkg, from.n, from.name, dep, to.n, to.name)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked: go list said %s", checked, out)
	}
}

// listed is what go list says of a package.
type listed struct {
	ImportPath, Dir         string
	GoFiles, IgnoredGoFiles []string
	Imports                 []string
}

type layer struct {
	n    int    // 1 base types … 4 commands
	name string // as the table says it
	test bool   // helpers and suites for tests (may import layers 1–3)
}

// readLayers reads the Layers table of ARCHITECTURE.md: rows whose first
// cell is "1. base types" … "4. commands", or "tests", and whose second
// lists the layer's packages in backquotes.
func readLayers(t *testing.T) map[string]layer {
	t.Helper()
	b, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Layers\n")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no Layers section")
	}
	row := regexp.MustCompile(`^\| (\d)\. ([^|]+?) \| ([^|]+) \|`)
	testRow := regexp.MustCompile(`^\| (tests) \| ([^|]+) \|`)
	pkgs := regexp.MustCompile("`([^`]+)`")
	m := map[string]layer{}
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "## ") {
			break
		}
		var ly layer
		var list string
		if g := row.FindStringSubmatch(l); g != nil {
			ly.n, _ = strconv.Atoi(g[1])
			ly.name, list = g[2], g[3]
		} else if g := testRow.FindStringSubmatch(l); g != nil {
			ly = layer{n: 3, name: g[1], test: true}
			list = g[2]
		} else {
			continue
		}
		for _, p := range pkgs.FindAllStringSubmatch(list, -1) {
			if prev, dup := m[p[1]]; dup {
				t.Errorf("package %s is in two layers: %s and %s", p[1], prev.name, ly.name)
			}
			m[p[1]] = ly
		}
	}
	if len(m) == 0 {
		t.Fatal("ARCHITECTURE.md's Layers table lists no package")
	}
	return m
}
