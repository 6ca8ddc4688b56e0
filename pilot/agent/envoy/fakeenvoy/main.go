// Command fakeenvoy stands in for Envoy in tests of the agent: it takes
// Envoy's command line, reads the admin port from the bootstrap file given
// with -c, serves the few admin endpoints the agent calls, and records every
// argument, admin call and signal as JSON lines in the file named by the
// environment variable FAKE_ENVOY_RECORD.
//
// Environment:
//
//	FAKE_ENVOY_RECORD           file to append records to (none: no records)
//	FAKE_ENVOY_EXIT_CODE        exit status on SIGTERM or when exiting by itself (default 0)
//	FAKE_ENVOY_EXIT_AFTER       exit by itself after this Go duration (default: never)
//	FAKE_ENVOY_SERVER_STATE     value of server.state in /stats (default 0, LIVE)
//	FAKE_ENVOY_WORKERS_STARTED  value of listener_manager.workers_started (default 1)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/meshpilot/meshpilot/pilot/agent/envoy/envoytest"
)

// recorder appends records to a file; safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	file *os.File
}

func (r *recorder) write(rec envoytest.Record) {
	rec.UnixNano = time.Now().UnixNano()
	if r.file == nil {
		return
	}
	line, err := json.Marshal(rec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy: encode record:", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.file.Write(append(line, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy: write record:", err)
	}
}

func main() {
	os.Exit(run())
}

func run() int {
	// Catch signals first: a SIGTERM while starting must be recorded too.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	rec := &recorder{}
	if path := os.Getenv(envoytest.EnvRecord); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakeenvoy: open record file:", err)
			return 2
		}
		defer f.Close()
		rec.file = f
	}
	rec.write(envoytest.Record{Kind: envoytest.KindArgs, Args: os.Args[1:]})

	exitCode, err := envInt(envoytest.EnvExitCode, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy:", err)
		return 2
	}
	state, err := envInt(envoytest.EnvServerState, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy:", err)
		return 2
	}
	workers, err := envInt(envoytest.EnvWorkersStarted, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy:", err)
		return 2
	}

	flags, err := parseArgs(os.Args[1:])
	if err != nil {
		// Envoy rejects a command line it does not know, with status 1.
		fmt.Fprintln(os.Stderr, "fakeenvoy:", err)
		return 1
	}
	configPath := flags["-c"]
	if configPath == "" {
		fmt.Fprintln(os.Stderr, "fakeenvoy: no bootstrap file given with -c")
		return 1
	}
	port, err := adminPort(configPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy:", err)
		return 1
	}

	fmt.Fprintln(os.Stdout, "fakeenvoy: starting (stdout)")
	fmt.Fprintln(os.Stderr, "fakeenvoy: starting (stderr)")

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeenvoy: admin listener:", err)
		return 1
	}
	quit := make(chan struct{}, 1)
	srv := &http.Server{
		Handler:           newAdmin(rec, state, workers, quit),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "fakeenvoy: admin server:", err)
		}
	}()

	var exitAfter <-chan time.Time
	if v := os.Getenv(envoytest.EnvExitAfter); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakeenvoy: FAKE_ENVOY_EXIT_AFTER:", err)
			return 2
		}
		exitAfter = time.After(d)
	}

	code := exitCode
	select {
	case s := <-sigs:
		rec.write(envoytest.Record{Kind: envoytest.KindSignal, Signal: signalName(s)})
	case <-quit:
		code = 0
	case <-exitAfter:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	rec.write(envoytest.Record{Kind: envoytest.KindExit, Code: code})
	fmt.Fprintln(os.Stderr, "fakeenvoy: exiting with status", code)
	return code
}

// newAdmin serves the admin endpoints the agent and its tests use.
func newAdmin(rec *recorder, state, workers int, quit chan<- struct{}) http.Handler {
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		rec.write(envoytest.Record{Kind: envoytest.KindAdmin, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery})
	}
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		fmt.Fprintf(w, "listener_manager.workers_started: %d\n", workers)
		fmt.Fprintf(w, "server.state: %d\n", state)
	})
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, "# TYPE envoy_server_live gauge\nenvoy_server_live{} 1\n"+
			"# TYPE envoy_cluster_upstream_cx_total counter\n"+
			"envoy_cluster_upstream_cx_total{cluster_name=\"xds-grpc\"} 3\n")
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		fmt.Fprintln(w, "LIVE")
	})
	mux.HandleFunc("/drain_listeners", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.Method != http.MethodPost {
			http.Error(w, "This endpoint requires POST", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("/quitquitquit", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.Method != http.MethodPost {
			http.Error(w, "This endpoint requires POST", http.StatusMethodNotAllowed)
			return
		}
		fmt.Fprintln(w, "OK")
		select {
		case quit <- struct{}{}:
		default:
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		http.NotFound(w, r)
	})
	return mux
}

// adminPort reads admin.address.socket_address.port_value from a JSON bootstrap.
func adminPort(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read bootstrap: %w", err)
	}
	var b struct {
		Admin struct {
			Address struct {
				SocketAddress struct {
					PortValue int `json:"port_value"`
				} `json:"socket_address"`
			} `json:"address"`
		} `json:"admin"`
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return 0, fmt.Errorf("bootstrap %s: %w", path, err)
	}
	port := b.Admin.Address.SocketAddress.PortValue
	if port <= 0 {
		return 0, fmt.Errorf("bootstrap %s: admin.address.socket_address.port_value missing", path)
	}
	return port, nil
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}
