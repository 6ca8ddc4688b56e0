package explainhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/xds"
)

// busySource has one connected proxy subscribed to CDS and no free debug
// generation slot; it counts generations.
type busySource struct{ generated int }

func (*busySource) ConnectedProxy(id string) (xds.ProxyView, bool) {
	return xds.ProxyView{Proxy: &model.Proxy{ID: id}, Watched: []model.WatchedResource{{TypeURL: model.ClusterType}}}, true
}

func (*busySource) PushContext() *model.PushContext { return &model.PushContext{} }

func (s *busySource) Generate(xds.ProxyView, *model.PushContext, string, *model.WatchedResource) (model.Resources, error) {
	s.generated++
	return nil, nil
}

func (*busySource) TryDebugGeneration() (func(), bool) { return nil, false }

// TestExplainWaitsForNoSlot: with every debug generation slot taken (by
// config dumps), explain answers 429 with Retry-After at once and
// generates nothing (it was unbounded: explains added to the dumps' cost).
func TestExplainWaitsForNoSlot(t *testing.T) {
	src := &busySource{}
	rec := httptest.NewRecorder()
	Handler(src).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"?proxyID=p.default&type=cds&name=outbound|80||a.default.svc.cluster.local", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("explain with no free slot: status %d, Retry-After %q (%s); want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if src.generated != 0 {
		t.Errorf("explain with no free slot generated %d times, want 0", src.generated)
	}
}
