package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestShouldInject(t *testing.T) {
	cfg := &Config{Policy: PolicyEnabled}
	disabled := &Config{Policy: PolicyDisabled}
	never := &Config{Policy: PolicyEnabled, NeverInjectSelector: []metav1.LabelSelector{
		{MatchLabels: map[string]string{"skip": "yes"}},
	}}
	always := &Config{Policy: PolicyDisabled, AlwaysInjectSelector: []metav1.LabelSelector{
		{MatchLabels: map[string]string{"mesh": "yes"}},
	}}
	type labels = map[string]string
	cases := []struct {
		name     string
		cfg      *Config
		revision string
		ns       labels
		nsName   string
		pod      labels
		podAnno  labels
		host     bool
		want     bool
	}{
		{name: "unlabeled namespace", ns: nil, want: false},
		{name: "istio-injection=enabled", ns: labels{"istio-injection": "enabled"}, want: true},
		{name: "istio-injection=disabled", ns: labels{"istio-injection": "disabled"}, want: false},
		{name: "istio-injection=enabled, pod label false", ns: labels{"istio-injection": "enabled"},
			pod: labels{"sidecar.istio.io/inject": "false"}, want: false},
		{name: "istio-injection=enabled, pod annotation false", ns: labels{"istio-injection": "enabled"},
			podAnno: labels{"sidecar.istio.io/inject": "false"}, want: false},
		{name: "istio-injection=enabled, label true wins over annotation false", ns: labels{"istio-injection": "enabled"},
			pod: labels{"sidecar.istio.io/inject": "true"}, podAnno: labels{"sidecar.istio.io/inject": "false"}, want: true},
		{name: "istio-injection=enabled, hostNetwork", ns: labels{"istio-injection": "enabled"}, host: true, want: false},
		{name: "istio-injection=enabled, kube-system", ns: labels{"istio-injection": "enabled"}, nsName: "kube-system", want: false},
		{name: "istio-injection=enabled wins over istio.io/rev", ns: labels{"istio-injection": "enabled", "istio.io/rev": "canary"}, want: true},
		{name: "istio-injection=enabled is not for a revision", revision: "canary",
			ns: labels{"istio-injection": "enabled"}, want: false},
		{name: "namespace istio.io/rev=default", ns: labels{"istio.io/rev": "default"}, want: true},
		{name: "namespace istio.io/rev=canary, injector default", ns: labels{"istio.io/rev": "canary"}, want: false},
		{name: "namespace istio.io/rev=canary, injector canary", revision: "canary",
			ns: labels{"istio.io/rev": "canary"}, want: true},
		{name: "namespace istio.io/rev with istio-injection=disabled", revision: "canary",
			ns: labels{"istio.io/rev": "canary", "istio-injection": "disabled"}, want: false},
		{name: "pod label inject=true in unlabeled namespace", pod: labels{"sidecar.istio.io/inject": "true"}, want: true},
		{name: "pod annotation inject=true in unlabeled namespace (webhook never called)",
			podAnno: labels{"sidecar.istio.io/inject": "true"}, want: false},
		{name: "pod label istio.io/rev=canary, injector canary", revision: "canary",
			pod: labels{"istio.io/rev": "canary"}, want: true},
		{name: "pod label istio.io/rev=canary, injector default", pod: labels{"istio.io/rev": "canary"}, want: false},
		{name: "pod label istio.io/rev and inject=true go to the revision", pod: labels{"istio.io/rev": "canary", "sidecar.istio.io/inject": "true"}, want: false},
		{name: "pod istio.io/rev in labeled namespace uses the namespace", revision: "canary",
			ns: labels{"istio-injection": "enabled"}, pod: labels{"istio.io/rev": "canary"}, want: false},
		{name: "policy disabled, namespace enabled", cfg: disabled, ns: labels{"istio-injection": "enabled"}, want: false},
		{name: "policy disabled, pod label true", cfg: disabled, ns: labels{"istio-injection": "enabled"},
			pod: labels{"sidecar.istio.io/inject": "true"}, want: true},
		{name: "neverInjectSelector", cfg: never, ns: labels{"istio-injection": "enabled"}, pod: labels{"skip": "yes"}, want: false},
		{name: "neverInjectSelector loses to pod label", cfg: never, ns: labels{"istio-injection": "enabled"},
			pod: labels{"skip": "yes", "sidecar.istio.io/inject": "true"}, want: true},
		{name: "alwaysInjectSelector under policy disabled", cfg: always, ns: labels{"istio-injection": "enabled"},
			pod: labels{"mesh": "yes"}, want: true},
		{name: "invalid inject value falls back to policy", ns: labels{"istio-injection": "enabled"},
			podAnno: labels{"sidecar.istio.io/inject": "maybe"}, want: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := c.cfg
			if conf == nil {
				conf = cfg
			}
			nsName := c.nsName
			if nsName == "" {
				nsName = "apps"
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName, Labels: c.ns}}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: c.pod, Annotations: c.podAnno},
				Spec:       corev1.PodSpec{HostNetwork: c.host},
			}
			if got := conf.ShouldInject(c.revision, ns, pod); got != c.want {
				t.Errorf("ShouldInject = %v, want %v", got, c.want)
			}
		})
	}
}
