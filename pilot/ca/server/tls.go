package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/pilot/ca"
)

// ServingCert is the control plane's own certificate for the secure port,
// signed by the Authority. It is reissued when the CA's bundle changes (a
// plug-in CA rotated) and when half its lifetime has passed, on the next
// handshake; handshakes never wait on anything but that signature.
type ServingCert struct {
	authority *ca.Authority
	names     []string
	ttl       time.Duration
	log       *slog.Logger
	now       func() time.Time // time.Now; tests move it

	mu     sync.Mutex
	cert   *tls.Certificate
	bundle *ca.Bundle // the bundle cert was issued by
	pool   *x509.CertPool
	renew  time.Time
}

// NewServingCert issues the first certificate for names (DNS SANs) now, so
// a broken CA fails start-up rather than the first handshake.
func NewServingCert(a *ca.Authority, names []string, ttl time.Duration, log *slog.Logger) (*ServingCert, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &ServingCert{authority: a, names: names, ttl: ttl, log: log, now: time.Now}
	if _, _, err := c.current(); err != nil {
		return nil, err
	}
	return c, nil
}

// current returns the certificate and client-CA pool in force, reissuing
// the certificate when it is due.
func (c *ServingCert) current() (*tls.Certificate, *x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.authority.Bundle()
	now := c.now()
	if c.cert != nil && b == c.bundle && now.Before(c.renew) {
		return c.cert, c.pool, nil
	}
	cert, err := c.authority.IssueServing(c.names, c.ttl)
	if err != nil {
		if c.cert != nil && now.Before(c.cert.Leaf.NotAfter) {
			// Keep serving the still-valid certificate; retry next handshake.
			c.log.Error("reissuing the secure port's certificate failed; keeping the current one", "error", err)
			return c.cert, c.pool, nil
		}
		return nil, nil, fmt.Errorf("issue serving certificate for %v: %w", c.names, err)
	}
	life := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
	c.cert, c.bundle, c.pool = cert, b, b.RootPool()
	c.renew = cert.Leaf.NotBefore.Add(life / 2)
	c.log.Info("secure port certificate issued", "dns_names", c.names, "not_after", cert.Leaf.NotAfter)
	return c.cert, c.pool, nil
}

// GetCertificate is tls.Config.GetCertificate: the certificate in force,
// reissued first when due. The admission webhook port serves it with its
// own configuration (HTTP/1.1 and HTTP/2, no client certificates).
func (c *ServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, _, err := c.current()
	return cert, err
}

// TLSConfig is the secure port's server configuration: our certificate,
// TLS 1.2 or later, HTTP/2, and client certificates verified against the
// current mesh root when a client sends one (renewals and mTLS xDS); a
// client without one authenticates with a token instead.
func (c *ServingCert) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := c.current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   tls.VerifyClientCertIfGiven,
				ClientCAs:    pool,
				NextProtos:   []string{"h2"},
			}, nil
		},
	}
}

// Credentials wraps gRPC TLS credentials built from cfg so that every failed
// handshake (a plaintext client, a bad client certificate) is counted and
// logged once, naming the peer and the cause.
func Credentials(cfg *tls.Config, m *Metrics, log *slog.Logger) credentials.TransportCredentials {
	return &handshakeLogger{TransportCredentials: credentials.NewTLS(cfg), metrics: m, log: log}
}

type handshakeLogger struct {
	credentials.TransportCredentials
	metrics *Metrics
	log     *slog.Logger
}

func (h *handshakeLogger) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := h.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		reason := handshakeReason(err)
		h.metrics.Rejections.WithLabelValues("tls", reason).Inc()
		level := slog.LevelWarn
		if reason == "eof" {
			level = slog.LevelDebug // TCP probes and port checks connect and close.
		}
		h.log.Log(context.Background(), level, "TLS handshake failed on the secure port",
			"peer", conn.RemoteAddr().String(), "reason", reason, clientlog.Error("error", err))
	}
	return c, info, err
}

func (h *handshakeLogger) Clone() credentials.TransportCredentials {
	return &handshakeLogger{TransportCredentials: h.TransportCredentials.Clone(), metrics: h.metrics, log: h.log}
}

func handshakeReason(err error) string {
	var rec tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &rec):
		return "not_tls"
	case errors.As(err, &certErr):
		return "bad_client_certificate"
	case errors.Is(err, io.EOF):
		return "eof"
	default:
		return "handshake"
	}
}
