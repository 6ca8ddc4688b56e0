package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/httpserve"
	"github.com/meshpilot/meshpilot/internal/httpserve/httpservetest"
)

// bound is how long a test waits for what must happen; generous for a
// loaded machine under -race.
const bound = 10 * time.Second

// holdingValidator holds every request until release is closed, telling
// entered about each; it records the deadline of the last one.
type holdingValidator struct {
	entered chan struct{}
	release chan struct{}

	mu       sync.Mutex
	deadline time.Time
	ended    bool
}

func newHoldingValidator() *holdingValidator {
	return &holdingValidator{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (v *holdingValidator) Validate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	v.entered <- struct{}{}
	select {
	case <-v.release:
	case <-ctx.Done():
		v.mu.Lock()
		v.ended = true
		v.mu.Unlock()
	}
	v.mu.Lock()
	v.deadline, _ = ctx.Deadline()
	v.mu.Unlock()
	return &admissionv1.AdmissionResponse{Allowed: true}
}

// Inject holds like Validate, so one type serves both endpoints' tests.
func (v *holdingValidator) Inject(ctx context.Context, req *admissionv1.AdmissionRequest, _ InjectParams) *admissionv1.AdmissionResponse {
	return v.Validate(ctx, req)
}

// TestValidationsBeyondCapGet429AtOnce: /validate and /inject each take at
// most their cap of requests at once; the next is answered 429 at once,
// and the places are free again once the held requests end.
func TestValidationsBeyondCapGet429AtOnce(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/validate", "/inject"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			v := newHoldingValidator()
			_, c, base := serve(t, Options{Validator: v, Injector: v, MaxValidationsInFlight: 2, MaxInjectionsInFlight: 2})
			c.Timeout = bound
			held := make(chan error, 2)
			for i := range 2 {
				go func() {
					resp, err := c.Post(base+path, "application/json", strings.NewReader(string(reviewBody(t, fmt.Sprint("held", i)))))
					if err == nil {
						if resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
						resp.Body.Close()
					}
					held <- err
				}()
			}
			<-v.entered
			<-v.entered
			// Both places are taken and held: a third review is answered at once.
			resp, err := c.Post(base+path, "application/json", strings.NewReader(string(reviewBody(t, "third"))))
			if err != nil {
				close(v.release)
				t.Fatalf("third review while 2 of 2 are in flight: %v, want 429 at once", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Errorf("third review: status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			close(v.release)
			for range 2 {
				if err := <-held; err != nil {
					t.Errorf("held review: %v", err)
				}
			}
			// The places are free again.
			if status, raw, _ := post(t, c, base+path, "application/json", reviewBody(t, "after")); status != http.StatusOK {
				t.Errorf("review after the others ended: status %d: %s", status, raw)
			}
		})
	}
}

// hugeValidator denies with a very long message and many causes.
type hugeValidator struct{}

func (hugeValidator) Validate(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	st := &metav1.Status{Code: 422, Reason: metav1.StatusReasonInvalid, Message: strings.Repeat("invalid; ", 200000), Details: &metav1.StatusDetails{}}
	for i := range 20000 {
		st.Details.Causes = append(st.Details.Causes, metav1.StatusCause{Field: fmt.Sprintf("spec.http[%d]", i), Message: "bad"})
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: st, Warnings: []string{strings.Repeat("w", 1<<20)}}
}

func TestValidateResponseSizeBounded(t *testing.T) {
	t.Parallel()
	_, c, base := serve(t, Options{Validator: hugeValidator{}})
	status, raw, ar := post(t, c, base+"/validate", "application/json", reviewBody(t, "huge"))
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if len(raw) > DefaultMaxValidateResponseBytes {
		t.Errorf("answer of %d bytes, cap %d", len(raw), DefaultMaxValidateResponseBytes)
	}
	if ar.Response.Allowed || ar.Response.UID != "uid-huge" || ar.Response.Result.Code != 422 ||
		!strings.HasPrefix(ar.Response.Result.Message, "invalid; ") {
		t.Errorf("shortened answer lost the verdict: allowed %v, uid %q, code %d, message %.40q",
			ar.Response.Allowed, ar.Response.UID, ar.Response.Result.Code, ar.Response.Result.Message)
	}
}

func TestReviewDeadlineFromAPIServerTimeout(t *testing.T) {
	t.Parallel()
	v := newHoldingValidator()
	close(v.release)
	_, c, base := serve(t, Options{Validator: v})
	start := time.Now()
	if status, raw, _ := post(t, c, base+"/validate?timeout=2s", "application/json", reviewBody(t, "t")); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deadline.IsZero() || v.deadline.After(start.Add(2*time.Second+bound)) || v.deadline.Before(start) {
		t.Errorf("validation deadline %v, want about 2s after %v (the API server's ?timeout=2s)", v.deadline, start)
	}
}

func TestClientGoneEndsValidationContext(t *testing.T) {
	t.Parallel()
	v := newHoldingValidator()
	defer close(v.release)
	_, c, base := serve(t, Options{Validator: v})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/validate", strings.NewReader(string(reviewBody(t, "gone"))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-v.entered
	cancel()
	<-done
	deadline := time.Now().Add(bound)
	for {
		v.mu.Lock()
		ended := v.ended
		v.mu.Unlock()
		if ended {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("validation context not ended after the client went away")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func TestIdleConnectionsBeyondCapClosed(t *testing.T) {
	t.Parallel()
	const maxConns, idle = 2, 6
	_, c, base := serve(t, Options{Validator: &recordingValidator{}, Limits: httpserve.Limits{MaxConns: maxConns, IdleTimeout: time.Hour}})
	addr := strings.TrimPrefix(base, "https://")
	tlsCfg := c.Transport.(*http.Transport).TLSClientConfig
	var conns []*tls.Conn
	for i := range idle {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: bound}, "tcp", addr, tlsCfg)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		body := reviewBody(t, "keepalive")
		fmt.Fprintf(conn, "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		conns = append(conns, conn)
	}
	// A new client (the API server) is answered although idle keep-alives
	// fill the cap, and enough of them were closed to make room.
	c.Timeout = bound
	if status, raw, _ := post(t, c, base+"/validate", "application/json", reviewBody(t, "new")); status != http.StatusOK {
		t.Fatalf("new client: status %d: %s", status, raw)
	}
	if n := httpservetest.CountClosed(conns, idle-maxConns, bound); n < idle-maxConns {
		t.Errorf("%d of %d idle connections closed by the server, want at least %d (cap %d)", n, idle, idle-maxConns, maxConns)
	}
}
