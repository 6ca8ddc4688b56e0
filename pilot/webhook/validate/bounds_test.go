package validate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// invalidRoutes is a VirtualService with n routes of a negative weight,
// each one field error.
func invalidRoutes(n int) string {
	var b strings.Builder
	b.WriteString(`{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"big","namespace":"default"},"spec":{"hosts":["reviews"],"http":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"route":[{"destination":{"host":"reviews"},"weight":-5}]}`)
	}
	b.WriteString(`]}}`)
	return b.String()
}

func TestManyInvalidFieldsBoundedAnswer(t *testing.T) {
	t.Parallel()
	n := 10000 // issue 32 had 62,000: 15 MB listing every one
	if testing.Short() {
		n = 2000
	}
	h, _ := handler(t, nil)
	resp := h.Validate(context.Background(), request("VirtualService", "virtualservices", "big", invalidRoutes(n)))
	if resp.Allowed {
		t.Fatal("invalid VirtualService admitted")
	}
	if got := len(resp.Result.Details.Causes); got != DefaultMaxErrors {
		t.Errorf("%d causes listed, want the first %d", got, DefaultMaxErrors)
	}
	if want := fmt.Sprintf("and %d more errors", n-DefaultMaxErrors); !strings.Contains(resp.Result.Message, want) {
		t.Errorf("message does not say %q: %.300s", want, resp.Result.Message)
	}
	if !strings.Contains(resp.Result.Message, "spec.http[0].route[0].weight") {
		t.Errorf("message does not name the first field: %.300s", resp.Result.Message)
	}
	out, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > 64<<10 {
		t.Errorf("answer of %d bytes for %d errors, want at most 64 KiB", len(out), n)
	}
}

func TestLongErrorsCut(t *testing.T) {
	t.Parallel()
	h, _ := handler(t, nil)
	long := strings.Repeat("x", 10000)
	resp := h.Validate(context.Background(), request("VirtualService", "virtualservices", "long", `{
	  "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
	  "metadata": {"name": "long", "namespace": "default"},
	  "spec": {"hosts": ["reviews"], "http": [{"match": [{"uri": {"regex": "(`+long+`"}}], "route": [{"destination": {"host": "reviews"}}]}]}}`))
	if resp.Allowed {
		t.Fatal("invalid regex admitted")
	}
	for _, c := range resp.Result.Details.Causes {
		if len(c.Message) > 1100 || len(c.Field) > 1100 {
			t.Errorf("cause of %d+%d bytes not cut", len(c.Field), len(c.Message))
		}
	}
}

// endingCtx is a context that ends after its Err has been asked `after`
// times: validation that looks at it between steps stops at the next one.
type endingCtx struct {
	context.Context
	cancel context.CancelFunc
	after  int32
	asked  atomic.Int32
}

func newEndingCtx(t *testing.T, after int32) *endingCtx {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &endingCtx{Context: ctx, cancel: cancel, after: after}
}

func (c *endingCtx) Err() error {
	if c.asked.Add(1) > c.after {
		c.cancel()
	}
	return c.Context.Err()
}

func TestEndedContextStopsValidation(t *testing.T) {
	t.Parallel()
	h, _ := handler(t, nil)
	obj := invalidRoutes(500)
	// Ended before: nothing is checked.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	resp := h.Validate(ended, request("VirtualService", "virtualservices", "big", obj))
	if resp.Allowed || resp.Result.Code != 504 || !strings.Contains(resp.Result.Message, context.Canceled.Error()) {
		t.Fatalf("ended context: code %d, %.200s; want a 504 denial saying %q", resp.Result.Code, resp.Result.Message, context.Canceled)
	}
	// Ends during validation (after the first step): the remaining steps
	// are skipped, no field errors come back.
	ctx := newEndingCtx(t, 1)
	resp = h.Validate(ctx, request("VirtualService", "virtualservices", "big", obj))
	if resp.Allowed || resp.Result.Code != 504 || len(resp.Result.Details.Causes) != 0 {
		t.Fatalf("context ended mid-way: code %d, %d causes, %.200s; want a 504 denial without causes",
			resp.Result.Code, len(resp.Result.Details.Causes), resp.Result.Message)
	}
	if _, err := h.opts.Validator.Check(newEndingCtx(t, 0), []byte(obj)); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with an ended context: %v, want context.Canceled", err)
	}
}
