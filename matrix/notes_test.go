package matrix

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotesEnterThroughNote holds ARCHITECTURE.md's promise that every
// note of a run enters the result through runner.note, once: no other
// function of the package assigns a result's Notes (a note added there
// would skip note's check that it was not said already).
func TestNotesEnterThroughNote(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "note" && fn.Recv != nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok {
					return true
				}
				for _, l := range as.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Notes" {
						if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "res" || isIdent(sel.X, "res") {
							t.Errorf("%s: %s assigns the result's Notes: add notes with r.note", fset.Position(as.Pos()), fn.Name.Name)
						}
					}
				}
				return true
			})
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
