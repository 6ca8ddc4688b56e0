package gateway

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/meshpilot/meshpilot/pilot/config/memory"
)

// TestNotInFlight: a write made from the version a write of the last pass
// was made from is dropped; the others are kept, and what is remembered
// is this pass's versions only.
func TestNotInFlight(t *testing.T) {
	c := &Controller{}
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	w := func(key types.NamespacedName, rv string) statusWrite {
		return statusWrite{kind: KindHTTPRoute, key: key, rv: rv}
	}
	names := func(ws []statusWrite) (out []string) {
		for _, w := range ws {
			out = append(out, w.key.Name+"@"+w.rv)
		}
		return out
	}
	steps := []struct {
		in, want []statusWrite
	}{
		{[]statusWrite{w(a, "1"), w(b, "2")}, []statusWrite{w(a, "1"), w(b, "2")}},
		// The informer has not shown either write: nothing again.
		{[]statusWrite{w(a, "1"), w(b, "2")}, nil},
		// a moved on; b's write is no longer wanted (shown, or not needed).
		{[]statusWrite{w(a, "3")}, []statusWrite{w(a, "3")}},
		// b from version 2 again: forgotten, so written.
		{[]statusWrite{w(b, "2")}, []statusWrite{w(b, "2")}},
	}
	for i, s := range steps {
		got := names(c.notInFlight(s.in))
		if want := names(s.want); !slices.Equal(got, want) {
			t.Errorf("pass %d: writes %v, want %v", i, got, want)
		}
	}
}

// TestFailedWriteBringsPass: a write that failed (not a conflict) is
// forgotten and brings another pass, which writes it again, even when no
// object changes.
func TestFailedWriteBringsPass(t *testing.T) {
	c, err := NewController(Options{Client: fake.NewClientset(), Store: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "r"}
	if got := c.notInFlight([]statusWrite{{kind: KindHTTPRoute, key: key, rv: "7"}}); len(got) != 1 {
		t.Fatalf("first pass: %d writes", len(got))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if c.writeOne(ctx, statusWrite{kind: KindHTTPRoute, key: key, rv: "7", update: func() error { return errors.New("injected") }}) {
		t.Fatal("a failed write counted as written")
	}
	select {
	case <-c.statusKick:
	case <-ctx.Done():
		t.Fatal("no status pass after a failed write")
	}
	if got := c.notInFlight([]statusWrite{{kind: KindHTTPRoute, key: key, rv: "7"}}); len(got) != 1 {
		t.Error("the failed write is not made again")
	}
}
