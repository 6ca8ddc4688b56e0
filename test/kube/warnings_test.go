package kube_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/pilot/bootstrap"
)

// warnings records the API server's Warning headers a client receives.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.text...)
}

// TestNoDeprecatedAPIWarnings: the control plane reads endpoints from
// EndpointSlices only, as istiod, and watches nothing the API server warns
// about (v1 Endpoints are deprecated since Kubernetes 1.33). Every client
// the server builds from its rest config reports warnings to the handler.
func TestNoDeprecatedAPIWarnings(t *testing.T) {
	env := kubetest.Start(t)
	seen := &warnings{}
	startKubeServer(t, env, func(o *bootstrap.Options) {
		cfg := *o.KubeRestConfig
		cfg.WarningHandler = seen
		o.KubeRestConfig = &cfg
	})
	for _, w := range seen.all() {
		if strings.Contains(w, "deprecated") {
			t.Errorf("API server warning after start: %s", w)
		}
	}
}
