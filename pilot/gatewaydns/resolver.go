// Package gatewaydns resolves the host names among east-west gateway
// addresses in the control plane, as istiod does with
// RESOLVE_HOSTNAME_GATEWAYS: a cloud load balancer often has only a host
// name, and EDS needs IP addresses. Names are looked up off the push path,
// re-resolved every refresh interval, and a change asks for a push; on a
// failed lookup the last addresses are kept.
package gatewaydns

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// Defaults, as istiod's: its minimal gateway TTL is 30 s.
const (
	DefaultRefresh = 30 * time.Second
	lookupTimeout  = 5 * time.Second
	// maxNames bounds the names followed (a misconfiguration must not
	// turn into thousands of lookups).
	maxNames = 256
)

// LookupFunc resolves host to its addresses (net.Resolver.LookupNetIP).
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// Options configure a Resolver.
type Options struct {
	// Lookup resolves a name; nil uses the system resolver.
	Lookup LookupFunc
	// Refresh is how often every name is resolved again; zero takes DefaultRefresh.
	Refresh time.Duration
	// OnChange is called (from Run's goroutine) when a name's addresses
	// changed: the gateways must be rebuilt.
	OnChange func()
	Log      *slog.Logger
}

// Resolver follows the gateway host names of the latest build. It
// implements model.GatewayNameResolver and is safe for concurrent use.
type Resolver struct {
	opts Options
	kick chan struct{}

	mu    sync.Mutex
	names map[string][]string // followed names → last addresses (sorted)
}

// New returns a resolver; lookups happen once Run runs.
func New(opts Options) *Resolver {
	if opts.Lookup == nil {
		var r netResolver
		opts.Lookup = r.lookup
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.OnChange == nil {
		opts.OnChange = func() {}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Resolver{opts: opts, kick: make(chan struct{}, 1), names: map[string][]string{}}
}

// Resolve returns the addresses known for names and makes them the
// followed set (at most maxNames, in order); names not seen before are
// resolved by Run, which then calls OnChange.
func (r *Resolver) Resolve(names []string) map[string][]string {
	if len(names) > maxNames {
		names = names[:maxNames]
	}
	out := make(map[string][]string, len(names))
	fresh := false
	r.mu.Lock()
	next := make(map[string][]string, len(names))
	for _, n := range names {
		addrs, ok := r.names[n]
		if !ok {
			fresh = true
		}
		next[n] = addrs
		out[n] = addrs
	}
	r.names = next
	r.mu.Unlock()
	if fresh {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return out
}

// Run resolves the followed names when new ones come and every refresh
// interval, until ctx is done.
func (r *Resolver) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
			r.refresh(ctx, true)
		case <-t.C:
			r.refresh(ctx, false)
		}
	}
}

// refresh resolves the followed names (only those never resolved when
// onlyNew) and calls OnChange once if any changed.
func (r *Resolver) refresh(ctx context.Context, onlyNew bool) {
	r.mu.Lock()
	var todo []string
	for n, addrs := range r.names {
		if !onlyNew || addrs == nil {
			todo = append(todo, n)
		}
	}
	r.mu.Unlock()
	sort.Strings(todo)
	changed := false
	for _, n := range todo {
		addrs, err := r.lookup(ctx, n)
		if err != nil {
			r.opts.Log.Warn("east-west gateway host name did not resolve; its last addresses are kept",
				clientlog.String("host", n), clientlog.Error("error", err))
			if ctx.Err() != nil {
				return
			}
			continue
		}
		r.mu.Lock()
		old, followed := r.names[n]
		if followed && !slices.Equal(old, addrs) {
			r.names[n] = addrs
			changed = true
			r.opts.Log.Info("east-west gateway host name resolved", clientlog.String("host", n), "addresses", addrs)
		}
		r.mu.Unlock()
	}
	if changed {
		r.opts.OnChange()
	}
}

// lookup resolves n within lookupTimeout: its addresses as sorted strings,
// never nil on success (an empty answer is an answer).
func (r *Resolver) lookup(ctx context.Context, n string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	ips, err := r.opts.Lookup(ctx, n)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if s := ip.Unmap().String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out, nil
}
