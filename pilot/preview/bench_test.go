package preview_test

import (
	"net/http"
	"testing"
)

// BenchmarkPreview times one preview of the reviews 50/50 change over
// Bookinfo with 3+50 connected sidecars (each generated before and after,
// CDS EDS LDS RDS, no cache), through the HTTP endpoint.
func BenchmarkPreview(b *testing.B) {
	srv, clients, _ := bootinfoReady(b, 50)
	b.ReportAllocs()
	for b.Loop() {
		code, res, raw := postPreview(b, srv, "", reviews5050)
		if code != http.StatusOK || res.ProxiesChecked != len(clients) {
			b.Fatalf("preview: %d %s", code, raw)
		}
	}
}
