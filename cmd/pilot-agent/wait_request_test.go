package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
)

// execute runs cmd with args and returns its stdout, stderr and error.
func execute(cmd *cobra.Command, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.Execute()
	return stdout.String(), stderr.String(), err
}

func TestWaitBecomesReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz/ready" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) < 3 {
			http.Error(w, "envoy not ready", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	_, stderr, err := execute(newWaitCommand(), "--url", srv.URL+"/healthz/ready", "--periodMillis", "10", "--timeoutSeconds", "30")
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, stderr)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("wait made %d requests, want 3 (ready on the third)", n)
	}
	if !strings.Contains(stderr, "Envoy is ready!") {
		t.Errorf("stderr %q lacks the ready message", stderr)
	}
}

func TestWaitTimesOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "workers have not yet started", http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	_, _, err := execute(newWaitCommand(), "--url", srv.URL, "--periodMillis", "20", "--timeoutSeconds", "1")
	if err == nil {
		t.Fatal("wait against a server that is never ready succeeded")
	}
	for _, want := range []string{"timeout waiting for Envoy proxy to become ready", "503", "workers have not yet started"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestWaitFlagsDefaults(t *testing.T) {
	cmd := newWaitCommand()
	for flag, want := range map[string]string{
		"url":                  "http://localhost:15021/healthz/ready",
		"timeoutSeconds":       "60",
		"periodMillis":         "500",
		"requestTimeoutMillis": "500",
	} {
		f := cmd.Flags().Lookup(flag)
		if f == nil || f.DefValue != want {
			t.Errorf("flag --%s: %+v, want default %s", flag, f, want)
		}
	}
}

// adminServer is a stand-in admin API; it returns its port.
func adminServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/config_dump":
			io.WriteString(w, `{"configs":[]}`)
		case r.Method == http.MethodPost && r.URL.Path == "/logging":
			body, _ := io.ReadAll(r.Body)
			io.WriteString(w, "level="+r.URL.Query().Get("level")+" body="+string(body))
		default:
			http.Error(w, "invalid path: "+r.URL.Path, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func TestRequestPrintsBody(t *testing.T) {
	port := adminServer(t)
	stdout, _, err := execute(requestCommand(nil), "GET", "config_dump", "--debug-port", port)
	if err != nil || stdout != `{"configs":[]}` {
		t.Errorf("request GET config_dump = %q, %v; want the body alone", stdout, err)
	}
	stdout, _, err = execute(requestCommand(nil), "post", "/logging?level=debug", "x", "--debug-port", port)
	if err != nil || stdout != "level=debug body=x" {
		t.Errorf("request POST logging = %q, %v", stdout, err)
	}
}

func TestRequestFails(t *testing.T) {
	port := adminServer(t)
	_, _, err := execute(requestCommand(nil), "GET", "nope", "--debug-port", port)
	if err == nil || !strings.Contains(err.Error(), "status 404") {
		t.Errorf("request GET nope = %v, want a status 404 error", err)
	}
	_, _, err = execute(newRequestCommand(), "GET", "config_dump", "--debug-port", "1234")
	if err == nil || !strings.Contains(err.Error(), "not in the allowed list") {
		t.Errorf("request on port 1234 = %v, want refused", err)
	}
	if _, _, err := execute(newRequestCommand(), "GET"); err == nil {
		t.Error("request with one argument succeeded")
	}
}
