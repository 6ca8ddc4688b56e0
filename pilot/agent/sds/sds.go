// Package sds serves the workload certificate and the mesh root to Envoy over
// the Secret Discovery Service (envoy.service.secret.v3), State of the World
// and Delta, on the agent's Unix socket. Envoy reaches it as cluster
// "sds-grpc" at ./var/run/secrets/workload-spiffe-uds/socket, and asks for the
// resources Istio's agent serves: "default" (key and chain) and "ROOTCA"
// (trusted roots), which come from a Provider, and the file-mounted secrets
// a DestinationRule names: "file-root:PATH" (a CA bundle file),
// "file-root:system" (the OS CA bundle, istiod's default root for TLS
// origination) and "file-cert:CERT~KEY" (a client certificate). When the
// Provider says a name changed, or a watched file changes, every stream
// watching it receives the new secret.
package sds

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"
)

// Resource names Envoy asks for, as Istio's agent names them.
const (
	// WorkloadCertName is the workload's key and certificate chain.
	WorkloadCertName = "default"
	// RootCertName is the trust bundle used to validate peers.
	RootCertName = "ROOTCA"
	// SecretTypeURL is the type of every SDS resource.
	SecretTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	// DefaultSocketPath is where Istio's agent listens, relative to the
	// working directory Envoy and the agent share.
	DefaultSocketPath = "./var/run/secrets/workload-spiffe-uds/socket"
)

// Socket and directory permissions, as Istio's pkg/uds sets them: the socket
// is world-connectable (0666) so Envoy, or an application container sharing
// the volume, can reach it whatever its uid; the directory is 0750.
const (
	socketMode = 0o666
	dirMode    = 0o750
)

// Item is one secret as the Provider hands it out: PEM bytes for the
// workload chain and key ("default") or the roots ("ROOTCA").
type Item struct {
	Name          string
	CertChainPEM  []byte
	PrivateKeyPEM []byte
	RootPEM       []byte
}

// Provider supplies secrets and says when they change.
type Provider interface {
	// Get returns the named secret ("default" or "ROOTCA"), blocking until the
	// first certificate exists; ctx bounds the wait.
	Get(ctx context.Context, name string) (*Item, error)
	// Subscribe returns a channel of names whose secret changed. The server
	// calls it once per Run.
	Subscribe() <-chan string
}

// Options configures a Server.
type Options struct {
	// SocketPath is the Unix socket to listen on (DefaultSocketPath in a pod).
	SocketPath string
	// Provider supplies the secrets. Required.
	Provider Provider
	// Log receives the server's logs; nil discards them. Key material is
	// never logged.
	Log *slog.Logger
	// OSRootPaths are where "file-root:system" is looked for, first
	// existing file wins; nil is OSRootPaths().
	OSRootPaths []string
	// MaxFileSize bounds each file read for a file-mounted secret; zero is
	// DefaultMaxFileSize.
	MaxFileSize int64
	// FileCheckInterval is how often the files of watched file-mounted
	// secrets are checked for changes (size and modification time; Istio's
	// agent watches them with inotify); zero is
	// DefaultFileCheckInterval.
	FileCheckInterval time.Duration
}

// DefaultFileCheckInterval is Options.FileCheckInterval's default.
const DefaultFileCheckInterval = 5 * time.Second

// Server is the SDS server. Create it with New and start it with Run.
type Server struct {
	path     string
	provider Provider
	log      *slog.Logger
	ready    chan struct{}
	files    files
	interval time.Duration

	mu      sync.Mutex
	streams map[*watcher]struct{}
}

// New returns a Server for o; nothing listens until Run.
func New(o Options) *Server {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := files{osRoots: o.OSRootPaths, maxSize: o.MaxFileSize}
	if f.osRoots == nil {
		f.osRoots = OSRootPaths()
	}
	if f.maxSize <= 0 {
		f.maxSize = DefaultMaxFileSize
	}
	interval := o.FileCheckInterval
	if interval <= 0 {
		interval = DefaultFileCheckInterval
	}
	return &Server{
		path:     o.SocketPath,
		provider: o.Provider,
		log:      log.With("component", "sds"),
		ready:    make(chan struct{}),
		files:    f,
		interval: interval,
		streams:  make(map[*watcher]struct{}),
	}
}

// Ready is closed once the server listens on its socket.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run listens on the socket (replacing a stale socket file, creating its
// directory), serves SDS until ctx is done, then stops the gRPC server,
// removes the socket and returns once every goroutine it started ended.
// Call Run once per Server.
func (s *Server) Run(ctx context.Context) error {
	if s.path == "" {
		return errors.New("sds: Options.SocketPath is empty")
	}
	if s.provider == nil {
		return errors.New("sds: Options.Provider is nil")
	}
	lis, err := listenUnix(s.path)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	secretv3.RegisterSecretDiscoveryServiceServer(g, &service{s: s})

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.dispatch(runCtx, s.provider.Subscribe())
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.checkFiles(runCtx)
	}()
	serveErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr <- g.Serve(lis)
	}()
	s.log.Info("SDS server listening", "socket", s.path)
	close(s.ready)

	var result error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			result = fmt.Errorf("sds: serving on %s: %w", s.path, err)
		}
	}
	cancel()
	g.Stop()
	wg.Wait()
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		result = errors.Join(result, fmt.Errorf("sds: removing socket %s: %w", s.path, err))
	}
	s.log.Info("SDS server stopped", "socket", s.path)
	return result
}

// listenUnix removes a stale socket file at path, creates its directory and
// listens, making the socket connectable by Envoy.
func listenUnix(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sds: removing stale socket %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return nil, fmt.Errorf("sds: creating socket directory %s: %w", filepath.Dir(path), err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("sds: listening on socket %s: %w", path, err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		lis.Close()
		return nil, fmt.Errorf("sds: setting mode of socket %s: %w", path, err)
	}
	return lis, nil
}

// dispatch fans the Provider's change notifications out to every open
// stream until ctx is done or the channel closes.
func (s *Server) dispatch(ctx context.Context, changes <-chan string) {
	for {
		select {
		case <-ctx.Done():
			return
		case name, ok := <-changes:
			if !ok {
				return
			}
			s.log.Debug("secret changed", "resource", name)
			s.notifyAll(name)
		}
	}
}

// notifyAll tells every stream that secret name changed.
func (s *Server) notifyAll(name string) {
	s.mu.Lock()
	for w := range s.streams {
		w.notify(name)
	}
	s.mu.Unlock()
}

// checkFiles looks, every interval until ctx is done, at the files of the
// file-mounted secrets some stream watches, and notifies the streams of
// those whose files changed (or appeared: a stream's first answer may
// have raced with a change). A notified stream sends only what differs
// from what it sent, so a change that leaves the content alone costs a read.
func (s *Server) checkFiles(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	stamps := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		watched := s.watchedFiles()
		for name := range stamps {
			if _, ok := watched[name]; !ok {
				delete(stamps, name)
			}
		}
		for name := range watched {
			st := s.files.stamp(name)
			if old, seen := stamps[name]; !seen || old != st {
				stamps[name] = st
				if seen {
					s.log.Info("secret file changed", "resource", name)
				}
				s.notifyAll(name)
			}
		}
	}
}

// watchedFiles is the union of the file-mounted names the streams watch.
func (s *Server) watchedFiles() map[string]struct{} {
	out := map[string]struct{}{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.streams {
		w.mu.Lock()
		for _, n := range w.files {
			out[n] = struct{}{}
		}
		w.mu.Unlock()
	}
	return out
}

func (s *Server) register(w *watcher) {
	s.mu.Lock()
	s.streams[w] = struct{}{}
	s.mu.Unlock()
}

func (s *Server) unregister(w *watcher) {
	s.mu.Lock()
	delete(s.streams, w)
	s.mu.Unlock()
}
