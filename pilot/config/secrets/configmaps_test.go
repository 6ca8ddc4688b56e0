package secrets_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/config/secrets"
)

// TestConfigMaps fills a Source with the ca.crt of a real API server's
// ConfigMaps: a change of another key notifies nobody, a ca.crt change and
// a deletion do, each found in the source; a ConfigMap without ca.crt is
// not there, and one whose ca.crt is too large is there empty.
func TestConfigMaps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := env.Clientset()
	ns, err := client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cm-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	api := client.CoreV1().ConfigMaps(ns.Name)
	big := strings.Repeat("x", 600<<10)
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Data: map[string]string{"ca.crt": "CA1", "other": big}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Data: map[string]string{"other": "x"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "huge"}, Data: map[string]string{"ca.crt": big}},
	} {
		if _, err := api.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating configmap %s: %v", cm.Name, err)
		}
	}
	src := secrets.NewSource()
	var changed notes
	caOf := func(name string) string {
		ca, ok := src.Snapshot().ConfigMapCA(ns.Name, name)
		if !ok {
			return "<none>"
		}
		return string(ca)
	}
	onChange := func(namespace, name string) {
		if namespace == ns.Name && name == "ca" {
			changed.add(name, caOf(name))
		}
	}
	cms, err := secrets.NewConfigMaps(client, src, onChange, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { cms.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testutil.Eventually(t, time.Minute, "configmap informer sync", cms.HasSynced)

	if got := caOf("ca"); got != "CA1" {
		t.Fatalf("after sync ca holds %q, want CA1", got)
	}
	if got := caOf("plain"); got != "<none>" {
		t.Errorf("plain (no ca.crt) holds %q", got)
	}
	if got := caOf("huge"); got != "" {
		t.Errorf("huge holds %d bytes, want none (over %d)", len(got), secrets.MaxCACertBytes)
	}

	cm, err := api.Get(ctx, "ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["other"] = "changed"
	if cm, err = api.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm.Data["ca.crt"] = "CA2"
	if _, err := api.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "ca.crt change notified", func() bool { return len(changed.list()) >= 2 })
	if err := api.Delete(ctx, "ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "deletion notified", func() bool { return len(changed.list()) >= 3 })
	// The sync's add, the ca.crt change (not the other key's), the deletion.
	if got, want := changed.list(), []string{"ca=CA1", "ca=CA2", "ca=<none>"}; !slices.Equal(got, want) {
		t.Errorf("notifications %v, want %v", got, want)
	}
}
