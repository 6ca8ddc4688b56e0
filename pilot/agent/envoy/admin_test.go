package envoy

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func startFake(t *testing.T, env ...string) *fake {
	t.Helper()
	f := newFake(t, env...)
	o := f.options()
	o.Stdout, o.Stderr = &lockedBuffer{}, &lockedBuffer{}
	o.TerminationDrainDuration = 0
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- New(o).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("fakeenvoy Run: %v", err)
		}
	})
	eventually(t, "fakeenvoy admin up", func() error {
		_, err := Request(ctx, f.port, http.MethodGet, "/ready", nil)
		return err
	})
	return f
}

func TestReady(t *testing.T) {
	f := startFake(t)
	if err := Ready(context.Background(), f.port); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	var query string
	for _, r := range f.records(t) {
		if r.Path == "/stats" {
			query = r.Query
		}
	}
	if !strings.HasPrefix(query, "usedonly&filter=") {
		t.Errorf("stats query %q, want usedonly&filter=...", query)
	}
}

func TestNotReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"initializing", []string{"FAKE_ENVOY_SERVER_STATE=3"}, "server.state is 3 (INITIALIZING)"},
		{"no workers", []string{"FAKE_ENVOY_WORKERS_STARTED=0"}, "workers have not yet started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.env...)
			err := Ready(context.Background(), f.port)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Ready = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("no envoy", func(t *testing.T) {
		f := newFake(t)
		if err := Ready(context.Background(), f.port); err == nil {
			t.Error("Ready with nothing listening = nil, want an error")
		}
	})
}

func TestRequest(t *testing.T) {
	f := startFake(t)
	body, err := Request(context.Background(), f.port, http.MethodGet, "ready", nil)
	if err != nil || strings.TrimSpace(string(body)) != "LIVE" {
		t.Errorf("Request ready = %q, %v; want LIVE", body, err)
	}
	body, err = Request(context.Background(), f.port, http.MethodGet, "/drain_listeners", nil)
	if err == nil || !strings.Contains(err.Error(), "status 405") {
		t.Errorf("GET drain_listeners = %q, %v; want a status 405 error", body, err)
	}
}

func TestParseStats(t *testing.T) {
	stats, err := parseStats([]byte("server.state: 0\ncluster.x.upstream_rq_time: P0(nan,1) P25(nan,2)\nbogus\nlistener_manager.workers_started: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats["server.state"] != 0 || stats["listener_manager.workers_started"] != 1 {
		t.Errorf("parseStats = %v", stats)
	}
}

func TestFakeEnvoyQuitQuitQuit(t *testing.T) {
	f := newFake(t)
	o := f.options()
	o.Stdout, o.Stderr = &lockedBuffer{}, &lockedBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- New(o).Run(context.Background()) }()
	eventually(t, "fakeenvoy admin up", func() error {
		_, err := Request(context.Background(), f.port, http.MethodGet, "ready", nil)
		return err
	})
	if _, err := Request(context.Background(), f.port, http.MethodPost, "quitquitquit", nil); err != nil {
		t.Fatalf("POST quitquitquit: %v", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("Run after quitquitquit = %v, want nil", err)
	}
}
