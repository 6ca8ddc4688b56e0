package bootstrap

import "testing"

// TestWebhookConfigurationNames: the names the patcher watches are those
// the chart renders (charts/meshpilot/templates/_helpers.tpl).
func TestWebhookConfigurationNames(t *testing.T) {
	for _, tc := range []struct{ revision, injection, validation string }{
		{"", "istio-sidecar-injector", "istio-validator-istio-system"},
		{"canary", "istio-sidecar-injector-canary", "istio-validator-canary-istio-system"},
	} {
		injection, validation := webhookConfigurationNames(tc.revision, "istio-system")
		if injection != tc.injection || validation != tc.validation {
			t.Errorf("revision %q: %q, %q; want %q, %q", tc.revision, injection, validation, tc.injection, tc.validation)
		}
	}
}
