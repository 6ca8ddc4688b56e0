package golden

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/fixtures"
)

const importPath = "github.com/meshpilot/meshpilot/internal/golden"

// TestMakeGoldenCoversEveryUse checks that make golden runs every test
// that uses this package: each package calling golden.New or golden.File
// in a test is in the Makefile's GOLDEN_PKGS, and each TestXxx calling them
// is in GOLDEN_TESTS. A golden set make golden skipped would go stale.
func TestMakeGoldenCoversEveryUse(t *testing.T) {
	root := fixtures.RepoRoot(t)
	pkgs, tests := makefileGolden(t, filepath.Join(root, "Makefile"))
	uses := goldenUses(t, root)
	if len(uses) == 0 {
		t.Fatal("no test in the repository calls golden.New or golden.File")
	}
	for _, u := range uses {
		if !slices.Contains(pkgs, u.pkg) {
			t.Errorf("%s: %s uses golden, but GOLDEN_PKGS in the Makefile does not list %s", u.file, u.test, u.pkg)
		}
		if strings.HasPrefix(u.test, "Test") && !slices.Contains(tests, u.test) {
			t.Errorf("%s: %s uses golden, but GOLDEN_TESTS in the Makefile does not name it", u.file, u.test)
		}
	}
}

// use is one function of a test file that calls golden.New or golden.File.
type use struct {
	file, pkg, test string
}

// makefileGolden reads GOLDEN_PKGS (without "./") and GOLDEN_TESTS.
func makefileGolden(t *testing.T, path string) (pkgs, tests []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	value := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `\s*:=(.*)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: no %s := line", path, name)
		}
		return strings.TrimSpace(m[1])
	}
	for _, p := range strings.Fields(value("GOLDEN_PKGS")) {
		pkgs = append(pkgs, strings.TrimPrefix(p, "./"))
	}
	return pkgs, strings.Split(value("GOLDEN_TESTS"), "|")
}

// goldenUses lists the functions of the repository's test files that call
// golden.New or golden.File, with their package directories relative to
// root.
func goldenUses(t *testing.T, root string) []use {
	t.Helper()
	var uses []use
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		local := goldenImportName(f)
		if local == "" {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Body != nil && callsSetUp(fn.Body, local) {
				uses = append(uses, use{file: rel, pkg: filepath.ToSlash(filepath.Dir(rel)), test: fn.Name.Name})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return uses
}

// goldenImportName is the name f refers to this package by, or "".
func goldenImportName(f *ast.File) string {
	for _, imp := range f.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != importPath {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return "golden"
	}
	return ""
}

// callsSetUp reports whether body calls local.New or local.File.
func callsSetUp(body *ast.BlockStmt, local string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return !found
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == local && (sel.Sel.Name == "New" || sel.Sel.Name == "File") {
				found = true
			}
		}
		return !found
	})
	return found
}
