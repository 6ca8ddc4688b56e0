// Package adsc is an ADS client that subscribes the way Envoy does: CDS and
// LDS as wildcards, then EDS for the EDS clusters CDS named, RDS for the
// route configs LDS named and ECDS for the extension configs LDS filters
// discover (when Types lists it), ACKing every response. Tests and pilot-load use it
// to stand in for real proxies, in SotW or Delta mode.
package adsc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/model"
)

// Config says who the client is and how it talks.
type Config struct {
	Node  *corev3.Node
	Delta bool
	// Types to subscribe, in Envoy's order; default CDS, EDS, LDS, RDS. Add
	// model.ExtensionConfigType to follow ECDS as Envoy does.
	Types []string
	// NACK, when set, is asked about every response; a non-nil error NACKs it.
	NACK func(typeURL string, resources map[string]*anypb.Any) error
	// OnResponse, when set, is called from the stream's goroutine after every
	// accepted response is stored: names are the resources it carried (all of
	// them for SotW, the added or updated ones for Delta) and size its bytes
	// on the wire. It lets load tools time changes without polling.
	OnResponse func(typeURL string, names []string, size int)
	// Shared, when set, is shared with the process's other clients: one
	// copy of each distinct resource, its references decoded once.
	Shared *Shared
}

// Client is one simulated proxy on one ADS stream.
type Client struct {
	cfg Config

	mu        sync.Mutex
	resources map[string]map[string]*anypb.Any // type → name → resource
	versions  map[string]string                // type → last version_info (SotW)
	nonces    map[string]string                // type → last nonce received
	responses map[string]int                   // type → responses received
	nacks     map[string]int
	wanted    map[string]*depNames // dependent type → names its parent referenced
	// refs[type][name][dependent type] are the dependent names one CDS or
	// LDS resource references, decoded once when the resource arrives.
	refs    map[string]map[string]map[string][]string
	bytes   int64
	changed chan struct{} // closed and replaced on every change
}

// New returns a client; Run starts it.
func New(cfg Config) *Client {
	if len(cfg.Types) == 0 {
		cfg.Types = []string{model.ClusterType, model.EndpointType, model.ListenerType, model.RouteType}
	}
	return &Client{
		cfg:       cfg,
		resources: map[string]map[string]*anypb.Any{},
		versions:  map[string]string{},
		nonces:    map[string]string{},
		responses: map[string]int{},
		nacks:     map[string]int{},
		wanted:    map[string]*depNames{},
		refs:      map[string]map[string]map[string][]string{},
		changed:   make(chan struct{}),
	}
}

// Run opens one ADS stream on conn and serves it until ctx is done (nil) or
// the stream fails (the error).
func (c *Client) Run(ctx context.Context, conn grpc.ClientConnInterface) error {
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	var err error
	if c.cfg.Delta {
		err = c.runDelta(ctx, ads)
	} else {
		err = c.runSotW(ctx, ads)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *Client) wants(typeURL string) bool { return slices.Contains(c.cfg.Types, typeURL) }

// store records a response's resources (replace for SotW; merge for Delta)
// and returns, for each dependent type whose set of referenced names
// changed, the new set and what it gained and lost. The sets are kept by
// reference count, so a response about one cluster costs O(log n) plus one
// merge when the set changes, not a walk over every cluster the client
// holds (the load tool must not be what it times).
func (c *Client) store(typeURL string, replace bool, add map[string]*anypb.Any, removed []string, size int) map[string]depChange {
	c.mu.Lock()
	if c.resources[typeURL] == nil {
		c.resources[typeURL] = map[string]*anypb.Any{}
		c.refs[typeURL] = map[string]map[string][]string{}
	}
	held := c.resources[typeURL]
	if replace {
		for n := range held {
			if _, kept := add[n]; !kept {
				removed = append(removed, n)
			}
		}
	}
	touched := map[string][]string{} // dependent type → names whose count moved
	for n, r := range add {
		old, ok := held[n]
		if ok && (old == r || (old.GetTypeUrl() == r.GetTypeUrl() && bytes.Equal(old.GetValue(), r.GetValue()))) {
			continue // resent unchanged (SotW): keep the held copy and its references
		}
		var refs map[string][]string
		if c.cfg.Shared != nil {
			r, refs = c.cfg.Shared.resource(typeURL, n, r)
		}
		held[n] = r
		if !ok {
			c.heldChanged(typeURL, n, true)
		}
		if c.cfg.Shared == nil {
			refs = referencedNames(typeURL, n, r)
		}
		// New references first, so a name both keep never leaves the set.
		for dep, names := range refs {
			c.depNames(dep).reference(names, 1)
			touched[dep] = append(touched[dep], names...)
		}
		c.unreference(typeURL, n, touched)
		c.refs[typeURL][n] = refs
	}
	for _, n := range removed {
		if _, ok := held[n]; !ok {
			continue
		}
		delete(held, n)
		c.heldChanged(typeURL, n, false)
		c.unreference(typeURL, n, touched)
	}
	changes := map[string]depChange{}
	for dep, names := range touched {
		if ch, changed := c.wanted[dep].settle(names, c.resources[dep]); changed {
			changes[dep] = ch
		}
	}
	c.responses[typeURL]++
	c.bytes += int64(size)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if c.cfg.OnResponse != nil {
		got := make([]string, 0, len(add))
		for n := range add {
			got = append(got, n)
		}
		c.cfg.OnResponse(typeURL, got, size)
	}
	return changes
}

// unreference drops the references resource n of typeURL made, listing
// the names whose count moved in touched. c.mu is held.
func (c *Client) unreference(typeURL, n string, touched map[string][]string) {
	for dep, names := range c.refs[typeURL][n] {
		c.depNames(dep).reference(names, -1)
		touched[dep] = append(touched[dep], names...)
	}
	delete(c.refs[typeURL], n)
}

// heldChanged keeps the count of missing names of typeURL when the client
// gains (held) or loses resource n. c.mu is held.
func (c *Client) heldChanged(typeURL, n string, held bool) {
	d := c.wanted[typeURL]
	if d == nil {
		return
	}
	if _, wanted := slices.BinarySearch(d.sorted, n); !wanted {
		return
	}
	if held {
		d.missing--
	} else {
		d.missing++
	}
}

func (c *Client) depNames(dep string) *depNames {
	d := c.wanted[dep]
	if d == nil {
		d = &depNames{count: map[string]int{}}
		c.wanted[dep] = d
	}
	return d
}

// depNames are the names of one dependent type (EDS, RDS, ECDS) that the
// parent type's resources reference.
type depNames struct {
	// count is the number of references per name (only names above 0).
	count map[string]int
	// sorted lists the referenced names in order, as of the last settle;
	// it is replaced, never changed in place, so a slice handed out stays.
	sorted []string
	// missing counts the names in sorted the client holds no resource for.
	missing int
}

// reference adds delta to the reference count of each name.
func (d *depNames) reference(names []string, delta int) {
	for _, n := range names {
		if d.count[n] += delta; d.count[n] <= 0 {
			delete(d.count, n)
		}
	}
}

// settle brings sorted and missing up to date after the counts of touched
// names moved, and reports what entered and left the set; held are the
// dependent type's resources.
func (d *depNames) settle(touched []string, held map[string]*anypb.Any) (depChange, bool) {
	slices.Sort(touched)
	touched = slices.Compact(touched)
	var ch depChange
	for _, n := range touched {
		_, was := slices.BinarySearch(d.sorted, n)
		is := d.count[n] > 0
		switch {
		case is && !was:
			ch.added = append(ch.added, n)
		case was && !is:
			ch.removed = append(ch.removed, n)
		default:
			continue
		}
		if _, ok := held[n]; !ok {
			if is {
				d.missing++
			} else {
				d.missing--
			}
		}
	}
	if len(ch.added)+len(ch.removed) == 0 {
		return ch, false
	}
	// Merge: sorted minus removed plus added, all three in order.
	out := make([]string, 0, len(d.sorted)+len(ch.added)-len(ch.removed))
	i, j, k := 0, 0, 0
	for i < len(d.sorted) || j < len(ch.added) {
		switch {
		case i < len(d.sorted) && k < len(ch.removed) && d.sorted[i] == ch.removed[k]:
			i++
			k++
		case j >= len(ch.added) || (i < len(d.sorted) && d.sorted[i] < ch.added[j]):
			out = append(out, d.sorted[i])
			i++
		default:
			out = append(out, ch.added[j])
			j++
		}
	}
	d.sorted = out
	ch.names = out
	return ch, true
}

// depChange is how one response changed a dependent type's names: names is
// the whole new set (sorted), added and removed the difference (sorted).
type depChange struct {
	names, added, removed []string
}

func (c *Client) recordNACK(typeURL string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nacks[typeURL]++
	close(c.changed)
	c.changed = make(chan struct{})
}

// referencedNames decodes what one resource asks for next, by type: an EDS
// cluster's assignment name; the route configs a listener's HTTP
// connection managers name and the extension configs its filters discover.
func referencedNames(typeURL, name string, a *anypb.Any) map[string][]string {
	switch typeURL {
	case model.ClusterType:
		cl := &clusterv3.Cluster{}
		if a.UnmarshalTo(cl) != nil || cl.GetType() != clusterv3.Cluster_EDS {
			return nil
		}
		if sn := cl.GetEdsClusterConfig().GetServiceName(); sn != "" {
			name = sn
		}
		return map[string][]string{model.EndpointType: {name}}
	case model.ListenerType:
		l := &listenerv3.Listener{}
		if a.UnmarshalTo(l) != nil {
			return nil
		}
		routes, extensions := listenerRefs(l)
		return map[string][]string{model.RouteType: routes, model.ExtensionConfigType: extensions}
	}
	return nil
}

// listenerRefs returns the route configs l's HTTP connection managers
// fetch over RDS and the names its network and HTTP filters discover over
// ECDS (config_discovery).
func listenerRefs(l *listenerv3.Listener) (routes, extensions []string) {
	hcm := func(a *anypb.Any) {
		h := &hcmv3.HttpConnectionManager{}
		if a.UnmarshalTo(h) != nil {
			return
		}
		if n := h.GetRds().GetRouteConfigName(); n != "" {
			routes = append(routes, n)
		}
		for _, f := range h.GetHttpFilters() {
			if f.GetConfigDiscovery() != nil {
				extensions = append(extensions, f.GetName())
			}
		}
	}
	if api := l.GetApiListener().GetApiListener(); api != nil {
		hcm(api)
	}
	chains := append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain())
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if f.GetConfigDiscovery() != nil {
				extensions = append(extensions, f.GetName())
			}
			if tc := f.GetTypedConfig(); tc != nil {
				hcm(tc)
			}
		}
	}
	return routes, extensions
}

// Resources returns a copy of the resources of typeURL, by name.
func (c *Client) Resources(typeURL string) map[string]*anypb.Any {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*anypb.Any, len(c.resources[typeURL]))
	for k, v := range c.resources[typeURL] {
		out[k] = v
	}
	return out
}

// Decoded unmarshals every resource of typeURL into fresh messages of the
// right type, keyed by name.
func (c *Client) Decoded(typeURL string) (map[string]proto.Message, error) {
	out := map[string]proto.Message{}
	for name, a := range c.Resources(typeURL) {
		m, err := a.UnmarshalNew()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", model.ShortType(typeURL), name, err)
		}
		out[name] = m
	}
	return out, nil
}

// Stats are counters of what the client received.
type Stats struct {
	Responses map[string]int
	NACKs     map[string]int
	Bytes     int64
}

// Stats returns what the client received so far.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Responses: map[string]int{}, NACKs: map[string]int{}, Bytes: c.bytes}
	for k, v := range c.responses {
		s.Responses[k] = v
	}
	for k, v := range c.nacks {
		s.NACKs[k] = v
	}
	return s
}

// WaitFor blocks until cond holds for the client or ctx ends.
func (c *Client) WaitFor(ctx context.Context, cond func(c *Client) bool) error {
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond(c) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for xDS state: %w", ctx.Err())
		case <-ch:
		}
	}
}

// Complete reports whether the client holds its initial configuration the
// way Envoy judges it: a response for every wildcard type it subscribes (CDS,
// LDS) and every EDS, RDS (and ECDS) resource those responses referenced.
func (c *Client) Complete() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	parent := map[string]string{model.EndpointType: model.ClusterType, model.RouteType: model.ListenerType,
		model.ExtensionConfigType: model.ListenerType}
	for _, t := range c.cfg.Types {
		p, dependent := parent[t]
		if !dependent {
			if c.responses[t] == 0 {
				return false
			}
			continue
		}
		if c.wants(p) && c.responses[p] == 0 {
			return false
		}
		if d := c.wanted[t]; d != nil && d.missing > 0 {
			return false
		}
	}
	return true
}

// HasAll reports whether every type the client subscribes has had a response.
func (c *Client) HasAll() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.cfg.Types {
		if c.responses[t] == 0 {
			return false
		}
	}
	return true
}

func streamEnded(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("stream closed by server")
	}
	return err
}

// sortedKeys returns m's keys in order, so dependent subscriptions go out
// in the same order every time.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
