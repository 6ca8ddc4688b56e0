// Package sdstest is an SDS client that behaves as Envoy does: it watches
// secrets by name over State of the World or Delta, validates and ACKs each
// response (NACKing what does not validate) and records what arrived, so
// tests can wait for a certificate or a rotation.
package sdstest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// SecretTypeURL is the type of SDS resources.
const SecretTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

// Client is one SDS stream watching a fixed set of names.
type Client struct {
	names  []string
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	latest  map[string]*tlsv3.Secret
	updates map[string]int
	nacks   int
	err     error
	changed chan struct{} // closed and replaced whenever anything is recorded
}

// Dial connects to the SDS socket (a path, or "unix:///abs/path") and opens
// a Delta or SotW stream watching names, sending node on the first request.
// The stream runs until Close or the end of the test.
func Dial(t testing.TB, socketPath string, delta bool, node *corev3.Node, names ...string) *Client {
	t.Helper()
	target := socketPath
	if !strings.HasPrefix(target, "unix:") {
		abs, err := filepath.Abs(socketPath)
		if err != nil {
			t.Fatalf("sdstest: socket path %q: %v", socketPath, err)
		}
		target = "unix://" + abs
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("sdstest: dialing %s: %v", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		names:   append([]string(nil), names...),
		conn:    conn,
		cancel:  cancel,
		done:    make(chan struct{}),
		latest:  map[string]*tlsv3.Secret{},
		updates: map[string]int{},
		changed: make(chan struct{}),
	}
	t.Cleanup(c.Close)
	sds := secretv3.NewSecretDiscoveryServiceClient(conn)
	if delta {
		stream, err := sds.DeltaSecrets(ctx)
		if err == nil {
			err = stream.Send(&discoveryv3.DeltaDiscoveryRequest{
				Node: node, TypeUrl: SecretTypeURL, ResourceNamesSubscribe: c.names,
			})
		}
		if err != nil {
			c.Close()
			t.Fatalf("sdstest: opening Delta SDS stream on %s: %v", target, err)
		}
		go c.runDelta(stream)
		return c
	}
	stream, err := sds.StreamSecrets(ctx)
	if err == nil {
		err = stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: SecretTypeURL, ResourceNames: c.names})
	}
	if err != nil {
		c.Close()
		t.Fatalf("sdstest: opening SotW SDS stream on %s: %v", target, err)
	}
	go c.runSotW(stream)
	return c
}

// Close ends the stream and the connection and waits for the client's
// goroutine. It is safe to call more than once.
func (c *Client) Close() {
	c.once.Do(func() {
		c.cancel()
		c.conn.Close()
	})
	<-c.done
}

// Latest returns the last secret received under name, nil if none yet.
func (c *Client) Latest(name string) *tlsv3.Secret {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest[name]
}

// Updates counts the distinct versions of name received so far: a response
// repeating the content the client holds does not count.
func (c *Client) Updates(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.updates[name]
}

// Nacks counts the responses the client rejected because a resource did not
// decode or validate.
func (c *Client) Nacks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nacks
}

// Err returns the error that ended the stream, nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// WaitFor blocks until cond holds (checked now and after every response or
// stream end) or ctx is done.
func (c *Client) WaitFor(ctx context.Context, cond func(*Client) bool) error {
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond(c) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sdstest: waiting for condition (stream error: %v): %w", c.Err(), ctx.Err())
		}
	}
}

func (c *Client) runSotW(stream grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) {
	defer close(c.done)
	accepted := ""
	for {
		resp, err := stream.Recv()
		if err != nil {
			c.finish(err)
			return
		}
		ack := &discoveryv3.DiscoveryRequest{TypeUrl: SecretTypeURL, ResponseNonce: resp.GetNonce(), ResourceNames: c.names}
		secrets, derr := decode(resp.GetTypeUrl(), resp.GetResources(), nil)
		if derr == nil {
			c.record(secrets, nil)
			accepted = resp.GetVersionInfo()
		} else {
			c.nack()
			ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: derr.Error()}
		}
		ack.VersionInfo = accepted
		if err := stream.Send(ack); err != nil {
			c.finish(err)
			return
		}
	}
}

func (c *Client) runDelta(stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]) {
	defer close(c.done)
	for {
		resp, err := stream.Recv()
		if err != nil {
			c.finish(err)
			return
		}
		ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: SecretTypeURL, ResponseNonce: resp.GetNonce()}
		anys := make([]*anypb.Any, 0, len(resp.GetResources()))
		names := make([]string, 0, len(resp.GetResources()))
		for _, r := range resp.GetResources() {
			anys = append(anys, r.GetResource())
			names = append(names, r.GetName())
		}
		secrets, derr := decode(resp.GetTypeUrl(), anys, names)
		if derr == nil {
			c.record(secrets, resp.GetRemovedResources())
		} else {
			c.nack()
			ack.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: derr.Error()}
		}
		if err := stream.Send(ack); err != nil {
			c.finish(err)
			return
		}
	}
}

// decode unpacks and validates secrets as Envoy would before accepting them;
// names, when given, are the Delta resource names each secret must carry.
func decode(typeURL string, anys []*anypb.Any, names []string) ([]*tlsv3.Secret, error) {
	if typeURL != SecretTypeURL {
		return nil, fmt.Errorf("response type_url %q is not %q", typeURL, SecretTypeURL)
	}
	out := make([]*tlsv3.Secret, 0, len(anys))
	for i, a := range anys {
		if a == nil {
			return nil, fmt.Errorf("resource %d has no body", i)
		}
		s := &tlsv3.Secret{}
		if err := a.UnmarshalTo(s); err != nil {
			return nil, fmt.Errorf("resource %d (%s): %w", i, a.GetTypeUrl(), err)
		}
		if err := s.ValidateAll(); err != nil {
			return nil, fmt.Errorf("secret %q: %w", s.GetName(), err)
		}
		if s.GetName() == "" {
			return nil, fmt.Errorf("resource %d: secret has no name", i)
		}
		if names != nil && names[i] != s.GetName() {
			return nil, fmt.Errorf("resource %q carries secret %q", names[i], s.GetName())
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Client) record(secrets []*tlsv3.Secret, removed []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range secrets {
		if prev := c.latest[s.GetName()]; prev == nil || !proto.Equal(prev, s) {
			c.latest[s.GetName()] = s
			c.updates[s.GetName()]++
		}
	}
	for _, n := range removed {
		delete(c.latest, n)
	}
	c.signalLocked()
}

func (c *Client) nack() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nacks++
	c.signalLocked()
}

func (c *Client) finish(err error) {
	if err == nil {
		err = errors.New("sdstest: stream ended")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	c.signalLocked()
}

func (c *Client) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
