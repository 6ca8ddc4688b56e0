package leaderelection

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshpilot/meshpilot/internal/kubetest"
)

// TestOneLeadsThenTheOtherTakesOver runs two electors for one Lease on a
// real API server: exactly one leads; when it stops, the other leads.
func TestOneLeadsThenTheOtherTakesOver(t *testing.T) {
	env := kubetest.Start(t)
	client := env.Clientset()
	const ns, lease = "istio-system", "test-leader"
	if _, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	leading := map[string]bool{}
	var history []string
	electors := map[string]*Elector{}
	cancels := map[string]context.CancelFunc{}
	done := map[string]chan struct{}{}
	for _, id := range []string{"a", "b"} {
		el, err := New(Options{Client: client, Namespace: ns, Identity: id,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		electors[id] = el
		ctx, cancel := context.WithCancel(context.Background())
		finished := make(chan struct{})
		cancels[id], done[id] = cancel, finished
		go func() {
			defer close(finished)
			err := el.Run(ctx, lease, func(lctx context.Context) {
				mu.Lock()
				leading[id] = true
				history = append(history, id)
				both := leading["a"] && leading["b"]
				mu.Unlock()
				if both {
					t.Errorf("both electors lead at once")
				}
				<-lctx.Done()
				mu.Lock()
				leading[id] = false
				mu.Unlock()
			})
			if err != nil {
				t.Errorf("elector %s: %v", id, err)
			}
		}()
	}
	t.Cleanup(func() {
		for id, cancel := range cancels {
			cancel()
			<-done[id]
		}
	})

	leader := waitLeader(t, &mu, leading)
	other := map[string]string{"a": "b", "b": "a"}[leader]
	got, err := client.CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != leader {
		t.Fatalf("Lease holder = %v, want %s", got.Spec.HolderIdentity, leader)
	}
	if electors[leader].Leading() != 1 || electors[other].Leading() != 0 {
		t.Fatalf("Leading(): leader %d, other %d", electors[leader].Leading(), electors[other].Leading())
	}

	// The leader stops: Run returns once its work ended; the other takes over.
	cancels[leader]()
	<-done[leader]
	if next := waitLeader(t, &mu, leading); next != other {
		t.Fatalf("after %s stopped, %s leads; want %s", leader, next, other)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(history) != 2 || history[0] != leader || history[1] != other {
		t.Fatalf("leadership history %v, want [%s %s]", history, leader, other)
	}
}

// waitLeader polls until exactly one elector leads and returns it.
func waitLeader(t *testing.T, mu *sync.Mutex, leading map[string]bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		var ids []string
		for id, l := range leading {
			if l {
				ids = append(ids, id)
			}
		}
		mu.Unlock()
		if len(ids) == 1 {
			return ids[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no single leader within 30s")
	return ""
}

func TestNewRequiresClientNamespaceAndIdentity(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a client succeeded")
	}
	// The identity comes from the caller's options (cmd/ reads POD_NAME),
	// never from this package's own reading of the environment.
	t.Setenv("POD_NAME", "from-env")
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"}) // never contacted
	if _, err := New(Options{Client: client, Namespace: "istio-system"}); err == nil || !strings.Contains(err.Error(), "Identity") {
		t.Fatalf("New without an identity: %v, want an error naming Identity", err)
	}
}
