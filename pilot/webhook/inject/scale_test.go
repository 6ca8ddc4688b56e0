package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	networkingv1beta1 "istio.io/api/networking/v1beta1"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshpilot/meshpilot/pilot/webhook/server"
)

// manyContainers is the hello pod with n application containers, each
// with a port, as an admission request.
func manyContainers(t testing.TB, n int) *admissionv1.AdmissionRequest {
	t.Helper()
	pod := helloPod(t)
	base := pod.Spec.Containers[0]
	pod.Spec.Containers = make([]corev1.Container, n)
	for i := range pod.Spec.Containers {
		c := *base.DeepCopy()
		c.Name = fmt.Sprintf("app-%d", i)
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(1024 + i%60000)}}
		pod.Spec.Containers[i] = c
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: "u", Namespace: "apps", Object: runtime.RawExtension{Raw: raw},
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}}
}

// BenchmarkInjectContainers is one /inject request for a pod of 2,500,
// 5,000 and 10,000 containers with Istio's ConfigMap.
func BenchmarkInjectContainers(b *testing.B) {
	inj := fixtureInjector(b)
	for _, n := range []int{2500, 5000, 10000} {
		req := manyContainers(b, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp := inj.Admit(req, Options{})
				if len(resp.Patch) == 0 {
					b.Fatalf("no patch: %v", resp.Result)
				}
			}
		})
	}
}

// TestInjectStopsWhenTheRequestEnds: the API server gave up on the request
// (its context ends while the injector works): /inject stops and answers
// the context's error instead of finishing the patch.
func TestInjectStopsWhenTheRequestEnds(t *testing.T) {
	t.Parallel()
	cfg := fixtureInjector(t).Config()
	req := manyContainers(t, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Webhook{
		Config: func() *Config { return cfg },
		// Called once the request is decoded, before rendering: the API
		// server's deadline passes during the injection.
		ProxyConfigs: func(string, map[string]string) []*networkingv1beta1.ProxyConfig {
			cancel()
			return nil
		},
	}
	resp := w.Inject(ctx, req, server.InjectParams{})
	if resp.Allowed || len(resp.Patch) > 0 || resp.Result == nil || !strings.Contains(resp.Result.Message, context.Canceled.Error()) {
		t.Fatalf("after the request's context ended: allowed=%v patch %d bytes, result %v; want a failure naming %q",
			resp.Allowed, len(resp.Patch), resp.Result, context.Canceled)
	}
}

// TestTemplateAppendIsLinear: the templates' append (Istio's sidecar
// template appends each container's name to a list) copies O(n) elements
// for n appends, where sprig's copies the whole list each time (n²/2), and
// a list a template holds never changes when an older version of it is
// appended to again.
func TestTemplateAppendIsLinear(t *testing.T) {
	t.Parallel()
	a := newAppender(context.Background())
	var l any = []any{}
	const n = 20000
	for i := range n {
		next, err := a.append(l, i)
		if err != nil {
			t.Fatal(err)
		}
		l = next
	}
	if got := l.([]any); len(got) != n || got[n-1] != n-1 {
		t.Fatalf("list of %d, last %v", len(got), got[len(got)-1])
	}
	if a.copied > 2*n {
		t.Errorf("%d appends copied %d elements, want at most %d", n, a.copied, 2*n)
	}

	base, _ := a.append([]any{"a"}, "b")
	x, _ := a.append(base, "x")
	y, _ := a.append(base, "y")
	if len(base) != 2 || x[2] != "x" || y[2] != "y" {
		t.Errorf("appending x then y to %v gave %v and %v, want [a b x] and [a b y]", base, x, y)
	}
	if _, err := a.append("not a list", 1); err == nil {
		t.Error("append to a string: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newAppender(ctx).append([]any{}, 1); err != context.Canceled {
		t.Errorf("append after the request ended: %v, want %v", err, context.Canceled)
	}
}

// TestInjectRefusesPodsAboveTheBound: more containers than MaxContainers
// (default DefaultMaxContainers) is an injection failure naming the count
// and the bound, decided before any rendering.
func TestInjectRefusesPodsAboveTheBound(t *testing.T) {
	t.Parallel()
	inj := fixtureInjector(t)
	resp := inj.Admit(manyContainers(t, 2*DefaultMaxContainers), Options{})
	want := fmt.Sprintf("%d containers, init and ephemeral containers; the injector takes at most %d", 2*DefaultMaxContainers, DefaultMaxContainers)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, want) {
		t.Errorf("%d containers: allowed=%v result %v, want a failure saying %q", 2*DefaultMaxContainers, resp.Allowed, resp.Result, want)
	}
	inj.MaxContainers = 20
	if resp := inj.Admit(manyContainers(t, 20), Options{}); !resp.Allowed || len(resp.Patch) == 0 {
		t.Errorf("20 containers, bound 20: allowed=%v result %v, want injected", resp.Allowed, resp.Result)
	}
	if resp := inj.Admit(manyContainers(t, 21), Options{}); resp.Allowed || !strings.Contains(resp.Result.Message, "at most 20") {
		t.Errorf("21 containers, bound 20: allowed=%v result %v, want refused", resp.Allowed, resp.Result)
	}
}

// TestOrderFirstIsMoveFirstInReverse: the one-pass init container order
// equals the moveFirst calls it replaced (last call first), duplicates
// and absent names included.
func TestOrderFirstIsMoveFirstInReverse(t *testing.T) {
	t.Parallel()
	list := func(ns ...string) []corev1.Container {
		cs := make([]corev1.Container, len(ns))
		for i, n := range ns {
			cs[i] = corev1.Container{Name: n, Image: fmt.Sprint(i)}
		}
		return cs
	}
	for _, c := range []struct {
		cs    []corev1.Container
		front []string
	}{
		{list("a", "istio-proxy", "b", "istio-init"), []string{"istio-init", "istio-validation", "b", "istio-proxy", "enable-core-dump"}},
		{list("a", "b", "c", "a"), []string{"c", "a", "zz", "c"}},
		{list(), []string{"a"}},
		{list("x", "y"), nil},
	} {
		want := c.cs
		for j := len(c.front) - 1; j >= 0; j-- {
			want = moveFirst(want, c.front[j])
		}
		got := orderFirst(c.cs, c.front)
		if len(got) != len(want) {
			t.Errorf("orderFirst(%v, %v) = %v, want %v", names(c.cs), c.front, names(got), names(want))
			continue
		}
		for i := range got {
			if got[i].Name != want[i].Name || got[i].Image != want[i].Image {
				t.Errorf("orderFirst(%v, %v) = %v, want %v", names(c.cs), c.front, names(got), names(want))
				break
			}
		}
	}
}
