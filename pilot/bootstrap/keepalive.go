package bootstrap

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/keepalive"
)

// NoMaxConnectionAge is the --keepaliveMaxServerConnectionAge default, as
// istiod's: connections are never closed for their age.
const NoMaxConnectionAge = time.Duration(math.MaxInt64)

// MaxConnectionAgeGrace is how long a connection told to go away (GOAWAY)
// for its age may keep its streams before it is closed: istiod's fixed 10 s.
const MaxConnectionAgeGrace = 10 * time.Second

// KeepaliveOptions are istiod's gRPC keepalive flags, applied to the
// plaintext (15010) and secure (15012) gRPC servers.
type KeepaliveOptions struct {
	// Interval (--keepaliveInterval, 30 s) is how long a connection may be
	// idle before the server pings the client; Timeout (--keepaliveTimeout,
	// 10 s) how long it waits for the answer before closing it.
	Interval, Timeout time.Duration
	// MaxServerConnectionAge (--keepaliveMaxServerConnectionAge) is the age
	// (±10% jitter) at which a connection is sent GOAWAY; after
	// MaxConnectionAgeGrace it is closed and its proxies reconnect, through
	// the Service, to any replica: that is how load spreads onto replicas
	// added later. The default is no limit; the chart sets 30m, as Istio's.
	MaxServerConnectionAge time.Duration
}

// DefaultKeepaliveOptions are istiod's defaults.
func DefaultKeepaliveOptions() KeepaliveOptions {
	return KeepaliveOptions{Interval: 30 * time.Second, Timeout: 10 * time.Second, MaxServerConnectionAge: NoMaxConnectionAge}
}

func (k KeepaliveOptions) validate() error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--keepaliveInterval", k.Interval}, {"--keepaliveTimeout", k.Timeout}, {"--keepaliveMaxServerConnectionAge", k.MaxServerConnectionAge}} {
		if d.v < 0 {
			return fmt.Errorf("%s: %v must not be negative", d.flag, d.v)
		}
	}
	return nil
}

// serverParameters are the gRPC server's keepalive parameters; a zero
// field takes istiod's default.
func (k KeepaliveOptions) serverParameters() keepalive.ServerParameters {
	def := DefaultKeepaliveOptions()
	if k.Interval == 0 {
		k.Interval = def.Interval
	}
	if k.Timeout == 0 {
		k.Timeout = def.Timeout
	}
	if k.MaxServerConnectionAge == 0 {
		k.MaxServerConnectionAge = def.MaxServerConnectionAge
	}
	return keepalive.ServerParameters{
		Time:                  k.Interval,
		Timeout:               k.Timeout,
		MaxConnectionAge:      k.MaxServerConnectionAge,
		MaxConnectionAgeGrace: MaxConnectionAgeGrace,
	}
}
