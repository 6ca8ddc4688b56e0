package file

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTripcomDir writes n ServiceEntries and n WorkloadEntries over 100
// namespaces, one file a namespace (pilot-load's layout), with mtimes in
// the past so no file is racily clean.
func writeTripcomDir(b *testing.B, dir string, n int) {
	b.Helper()
	files := map[string]*strings.Builder{}
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%100)
		sb := files[ns]
		if sb == nil {
			sb = &strings.Builder{}
			files[ns] = sb
		}
		fmt.Fprintf(sb, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: svc-%d
  namespace: %s
spec:
  hosts:
  - svc-%d.%s.example.com
  ports:
  - number: 80
    name: http
    protocol: HTTP
  resolution: STATIC
  workloadSelector:
    labels:
      app: svc-%d
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: svc-%d-0
  namespace: %s
spec:
  address: 10.%d.%d.%d
  labels:
    app: svc-%d
---
`, i, ns, i, ns, i, i, ns, (i>>16)&255, (i>>8)&255, i&255, i)
	}
	old := time.Now().Add(-time.Hour)
	for ns, sb := range files {
		path := filepath.Join(dir, ns+".yaml")
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadOneFileChanged measures a reload of 30k ServiceEntries and
// 30k WorkloadEntries in 100 files after one new marker file (the file
// source's work for one change of the Trip.com load run).
func BenchmarkLoadOneFileChanged(b *testing.B) {
	dir := b.TempDir()
	writeTripcomDir(b, dir, 30000)
	l := NewLoaderWithOptions(dir, nil, Options{Validator: testValidator()})
	if _, err := l.Load(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		marker := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: marker-%d
  namespace: load-markers
spec:
  hosts:
  - marker-%d.example.com
  ports:
  - number: 80
    name: http
    protocol: HTTP
`, i, i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("marker-%d.yaml", i)), []byte(marker), 0o644); err != nil {
			b.Fatal(err)
		}
		snap, err := l.Load()
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Configs) != 60000+i+1 || len(snap.Errors) != 0 {
			b.Fatalf("%d configs, %d errors", len(snap.Configs), len(snap.Errors))
		}
	}
}
