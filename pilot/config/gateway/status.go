package gateway

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// WriteStatus writes the status of the latest translation to the objects
// whose status differs from it (times aside), then again after each
// translation or status change of an object, at most QPS writes a second,
// until ctx is done. Run it on the leader only.
func (c *Controller) WriteStatus(ctx context.Context) error {
	if err := c.WaitReady(ctx); err != nil {
		return nil
	}
	c.opts.Log.Info("gateway api status writer started")
	for {
		start := time.Now()
		if out := c.latest(); out != nil {
			if err := c.writeAll(ctx, out); err != nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.statusKick:
		}
		// Passes at most every statusInterval: what changed meanwhile
		// is written once (a Gateway's attachedRoutes while routes
		// arrive one by one).
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(statusInterval - time.Since(start)):
		}
	}
}

// statusInterval is the least time between the starts of two status
// passes: 1,000 routes created one by one gave about as many writes of
// their Gateway without it (BENCHMARKS.md, issue 19, fourth round).
const statusInterval = 100 * time.Millisecond

// writeAll writes every status of out that differs, Workers at a time,
// GatewayClasses and Gateways first; it returns an error only when ctx
// ended.
func (c *Controller) writeAll(ctx context.Context, out *Output) error {
	var pending []statusWrite
	c.diff(ctx, out, metav1.Now(), func(w statusWrite) { pending = append(pending, w) })
	pending = c.notInFlight(pending)
	written, err := c.flush(ctx, pending)
	if written > 0 {
		c.opts.Log.Info("gateway api status written", "objects", written)
	}
	return err
}

// statusWrite is one object's status update, made from the object at
// resourceVersion rv.
type statusWrite struct {
	kind, rv string
	key      types.NamespacedName
	update   func() error
}

type writeKey struct {
	kind string
	key  types.NamespacedName
}

// notInFlight drops the writes already made from the same version of
// their object: the informer has not shown the write yet (writing again
// would only conflict), or it failed on a conflict (a newer version is on
// its way, and brings another pass). It keeps the versions written
// through for the next pass, and forgets the others.
func (c *Controller) notInFlight(writes []statusWrite) []statusWrite {
	c.writtenMu.Lock()
	defer c.writtenMu.Unlock()
	next := make(map[writeKey]string, len(writes))
	out := writes[:0]
	for _, w := range writes {
		k := writeKey{w.kind, w.key}
		next[k] = w.rv
		if c.written[k] != w.rv {
			out = append(out, w)
		}
	}
	c.written = next
	return out
}

// flush runs writes in order on up to Workers goroutines, each write
// waiting for the rate limiter; it returns how many succeeded, and an
// error only when ctx ended.
func (c *Controller) flush(ctx context.Context, writes []statusWrite) (int, error) {
	var written atomic.Int64
	next := make(chan statusWrite)
	var wg sync.WaitGroup
	for range min(c.opts.Workers, len(writes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range next {
				if c.writeOne(ctx, w) {
					written.Add(1)
				}
			}
		}()
	}
	var err error
send:
	for _, w := range writes {
		select {
		case next <- w:
		case <-ctx.Done():
			err = ctx.Err()
			break send
		}
	}
	close(next)
	wg.Wait()
	return int(written.Load()), err
}

// retryAfter is how long a failed status write (not a conflict) waits
// before the pass that tries it again.
const retryAfter = time.Second

// writeOne writes one status after the rate limiter allows it, and says
// whether it was written.
func (c *Controller) writeOne(ctx context.Context, w statusWrite) bool {
	if c.limiter.Wait(ctx) != nil {
		return false
	}
	err := w.update()
	if err == nil {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	// A conflict means a newer object is on its way: its event brings
	// another pass. Any other failure is tried again by a later pass.
	level := c.opts.Log.Warn
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		level = c.opts.Log.Debug
	} else {
		c.writtenMu.Lock()
		delete(c.written, writeKey{w.kind, w.key})
		c.writtenMu.Unlock()
		time.AfterFunc(retryAfter, c.kickStatus)
	}
	level("gateway api status not written", "kind", w.kind, "object", w.key.String(), "error", err)
	return false
}

// diff passes to write each object of out whose status differs from its
// current one (times aside), with the update that writes it.
func (c *Controller) diff(ctx context.Context, out *Output, now metav1.Time, write func(statusWrite)) {
	v1 := c.opts.StatusClient.GatewayV1()
	for _, name := range sortedKeys(out.GatewayClasses) {
		cur, err := c.classes.Get(name)
		if err != nil {
			continue
		}
		st := out.GatewayClasses[name]
		want := *st.DeepCopy()
		keepTransitionTimes(want.Conditions, cur.Status.Conditions, now)
		if equality.Semantic.DeepEqual(cur.Status, want) {
			continue
		}
		obj := cur.DeepCopy()
		obj.Status = want
		write(statusWrite{kind: KindGatewayClass, key: types.NamespacedName{Name: name}, rv: cur.ResourceVersion, update: func() error {
			_, err := v1.GatewayClasses().UpdateStatus(ctx, obj, metav1.UpdateOptions{})
			return err
		}})
	}
	for _, key := range sortedNames(out.Gateways) {
		cur, err := c.gateways.Gateways(key.Namespace).Get(key.Name)
		if err != nil {
			continue
		}
		st := out.Gateways[key]
		want := *st.DeepCopy()
		keepTransitionTimes(want.Conditions, cur.Status.Conditions, now)
		keepListenerTimes(want.Listeners, cur.Status.Listeners, func(l *gwv1.ListenerStatus) (gwv1.SectionName, []metav1.Condition) { return l.Name, l.Conditions }, now)
		// As istiod: no address is reported until there is one, and then
		// one is never taken away (a load balancer's address pending
		// again keeps the last).
		if len(want.Addresses) == 0 {
			want.Addresses = cur.Status.Addresses
		}
		if equality.Semantic.DeepEqual(cur.Status, want) {
			continue
		}
		obj := cur.DeepCopy()
		obj.Status = want
		write(statusWrite{kind: KindGateway, key: key, rv: cur.ResourceVersion, update: func() error {
			_, err := v1.Gateways(key.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
			return err
		}})
	}
	writeRoutes(ctx, KindHTTPRoute, write, now, routeStatuses(out.HTTPRoutes, func(s gwv1.HTTPRouteStatus) gwv1.RouteStatus { return s.RouteStatus }),
		func(key types.NamespacedName) (*gwv1.HTTPRoute, error) {
			return c.routes.HTTPRoutes(key.Namespace).Get(key.Name)
		},
		func(r *gwv1.HTTPRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus },
		func(ctx context.Context, r *gwv1.HTTPRoute) error {
			_, err := v1.HTTPRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
			return err
		})
	if c.grpcRoutes != nil {
		writeRoutes(ctx, KindGRPCRoute, write, now, routeStatuses(out.GRPCRoutes, func(s gwv1.GRPCRouteStatus) gwv1.RouteStatus { return s.RouteStatus }),
			func(key types.NamespacedName) (*gwv1.GRPCRoute, error) {
				return c.grpcRoutes.GRPCRoutes(key.Namespace).Get(key.Name)
			},
			func(r *gwv1.GRPCRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus },
			func(ctx context.Context, r *gwv1.GRPCRoute) error {
				_, err := v1.GRPCRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
				return err
			})
	}
	if c.tlsRoutes != nil {
		writeRoutes(ctx, KindTLSRoute, write, now, routeStatuses(out.TLSRoutes, func(s gwv1.TLSRouteStatus) gwv1.RouteStatus { return s.RouteStatus }),
			func(key types.NamespacedName) (*gwv1.TLSRoute, error) {
				return c.tlsRoutes.TLSRoutes(key.Namespace).Get(key.Name)
			},
			func(r *gwv1.TLSRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus },
			func(ctx context.Context, r *gwv1.TLSRoute) error {
				_, err := v1.TLSRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
				return err
			})
	}
	if c.tcpRoutes != nil {
		writeRoutes(ctx, KindTCPRoute, write, now, routeStatuses(out.TCPRoutes, func(s gwv1.TCPRouteStatus) gwv1.RouteStatus { return s.RouteStatus }),
			func(key types.NamespacedName) (*gwv1.TCPRoute, error) {
				return c.tcpRoutes.TCPRoutes(key.Namespace).Get(key.Name)
			},
			func(r *gwv1.TCPRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus },
			func(ctx context.Context, r *gwv1.TCPRoute) error {
				_, err := v1.TCPRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
				return err
			})
	}
	if c.udpRoutes != nil {
		writeRoutes(ctx, KindUDPRoute, write, now, routeStatuses(out.UDPRoutes, func(s gwv1.UDPRouteStatus) gwv1.RouteStatus { return s.RouteStatus }),
			func(key types.NamespacedName) (*gwv1.UDPRoute, error) {
				return c.udpRoutes.UDPRoutes(key.Namespace).Get(key.Name)
			},
			func(r *gwv1.UDPRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus },
			func(ctx context.Context, r *gwv1.UDPRoute) error {
				_, err := v1.UDPRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
				return err
			})
	}
	if c.tlsPolicies != nil {
		for _, key := range sortedNames(out.BackendTLSPolicies) {
			cur, err := c.tlsPolicies.BackendTLSPolicies(key.Namespace).Get(key.Name)
			if err != nil {
				continue
			}
			want := policyStatus(cur.Status, out.BackendTLSPolicies[key], now)
			if equality.Semantic.DeepEqual(cur.Status, want) {
				continue
			}
			obj := cur.DeepCopy()
			obj.Status = want
			write(statusWrite{kind: KindBackendTLSPolicy, key: key, rv: cur.ResourceVersion, update: func() error {
				_, err := v1.BackendTLSPolicies(key.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
				return err
			}})
		}
	}
	if c.listenerSets != nil {
		c.writeListenerSets(ctx, out, now, write)
	}
}

// keepListenerTimes keeps the transition times of each wanted listener's
// conditions from the current listener of the same name (of a Gateway or
// a ListenerSet; of gets a listener's name and conditions).
func keepListenerTimes[L any](want, cur []L, of func(*L) (gwv1.SectionName, []metav1.Condition), now metav1.Time) {
	for i := range want {
		name, conds := of(&want[i])
		var prev []metav1.Condition
		for j := range cur {
			if n, c := of(&cur[j]); n == name {
				prev = c
			}
		}
		keepTransitionTimes(conds, prev, now)
	}
}

// writeListenerSets writes, through write, the status of each ListenerSet
// of out that differs from its current one (times aside).
func (c *Controller) writeListenerSets(ctx context.Context, out *Output, now metav1.Time, write func(statusWrite)) {
	v1 := c.opts.StatusClient.GatewayV1()
	for _, key := range sortedNames(out.ListenerSets) {
		cur, err := c.listenerSets.ListenerSets(key.Namespace).Get(key.Name)
		if err != nil {
			continue
		}
		st := out.ListenerSets[key]
		want := *st.DeepCopy()
		keepTransitionTimes(want.Conditions, cur.Status.Conditions, now)
		keepListenerTimes(want.Listeners, cur.Status.Listeners, func(l *gwv1.ListenerEntryStatus) (gwv1.SectionName, []metav1.Condition) { return l.Name, l.Conditions }, now)
		if equality.Semantic.DeepEqual(cur.Status, want) {
			continue
		}
		obj := cur.DeepCopy()
		obj.Status = want
		write(statusWrite{kind: KindListenerSet, key: key, rv: cur.ResourceVersion, update: func() error {
			_, err := v1.ListenerSets(key.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
			return err
		}})
	}
}

// writeRoutes writes, through write, the status of each route of one kind
// whose current status (status(get(key))) differs from ours[key] as
// routeStatus merges them.
func writeRoutes[T interface {
	DeepCopy() T
	GetResourceVersion() string
}](ctx context.Context, kind string,
	write func(statusWrite), now metav1.Time, ours map[types.NamespacedName]gwv1.RouteStatus,
	get func(types.NamespacedName) (T, error), status func(T) *gwv1.RouteStatus, update func(context.Context, T) error,
) {
	for _, key := range sortedNames(ours) {
		cur, err := get(key)
		if err != nil {
			continue
		}
		want := routeStatus(*status(cur), ours[key], now)
		if equality.Semantic.DeepEqual(*status(cur), want) {
			continue
		}
		obj := cur.DeepCopy()
		*status(obj) = want
		write(statusWrite{kind: kind, key: key, rv: cur.GetResourceVersion(), update: func() error { return update(ctx, obj) }})
	}
}

// routeStatuses gives the RouteStatus of each route of a kind's statuses.
func routeStatuses[S any](m map[types.NamespacedName]S, f func(S) gwv1.RouteStatus) map[types.NamespacedName]gwv1.RouteStatus {
	out := make(map[types.NamespacedName]gwv1.RouteStatus, len(m))
	for k, v := range m {
		out[k] = f(v)
	}
	return out
}

// routeStatus is cur with the parents of this controller replaced by
// ours (the parents other controllers wrote are kept, first).
func routeStatus(cur, ours gwv1.RouteStatus, now metav1.Time) gwv1.RouteStatus {
	var out gwv1.RouteStatus
	for _, p := range cur.Parents {
		if p.ControllerName != ControllerName {
			out.Parents = append(out.Parents, *p.DeepCopy())
		}
	}
	for _, p := range ours.Parents {
		p = *p.DeepCopy()
		for _, q := range cur.Parents {
			if q.ControllerName == ControllerName && equality.Semantic.DeepEqual(q.ParentRef, p.ParentRef) {
				keepTransitionTimes(p.Conditions, q.Conditions, now)
			}
		}
		if p.Conditions[0].LastTransitionTime.IsZero() {
			keepTransitionTimes(p.Conditions, nil, now)
		}
		out.Parents = append(out.Parents, p)
	}
	if out.Parents == nil {
		out.Parents = []gwv1.RouteParentStatus{}
	}
	return out
}

// policyStatus is cur with the ancestors of this controller replaced by
// ours (those other controllers wrote are kept, first, as far as the
// CRD's limit of ancestors allows).
func policyStatus(cur, ours gwv1.PolicyStatus, now metav1.Time) gwv1.PolicyStatus {
	out := gwv1.PolicyStatus{Ancestors: []gwv1.PolicyAncestorStatus{}}
	for _, a := range cur.Ancestors {
		if a.ControllerName != ControllerName && len(out.Ancestors) < maxPolicyAncestors-len(ours.Ancestors) {
			out.Ancestors = append(out.Ancestors, *a.DeepCopy())
		}
	}
	for _, a := range ours.Ancestors {
		a = *a.DeepCopy()
		var prev []metav1.Condition
		for _, q := range cur.Ancestors {
			if q.ControllerName == ControllerName && equality.Semantic.DeepEqual(q.AncestorRef, a.AncestorRef) {
				prev = q.Conditions
			}
		}
		keepTransitionTimes(a.Conditions, prev, now)
		out.Ancestors = append(out.Ancestors, a)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedNames[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		if a.Namespace != b.Namespace {
			return strings.Compare(a.Namespace, b.Namespace)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
