// Package envoyfilter applies networking.istio.io EnvoyFilter patches to
// the Envoy resources the generators build, as istiod applies them.
//
// EnvoyFilters are compiled once per set of EnvoyFilters (Index, held by the
// PushContext): patch values are parsed into Envoy protos then, and a value
// that does not parse is reported and dropped. Per proxy, For selects the
// patches that apply: root-namespace filters mesh-wide, others in their
// namespace, narrowed by workloadSelector or targetRefs and the patch's
// proxy match, ordered by priority, then root namespace first, then
// creation time, then namespace and name. Patches' Key names that
// selection, so generators can share patched resources between proxies
// that have the same patches.
//
// A patch that cannot apply, or whose result fails Envoy validation, is
// skipped and reported (Reporter); the resource stays as it was without it.
//
// Applying N patches to one resource costs O(N + size) proto work: it is
// copied once, its HTTP connection managers are decoded and encoded once
// (not once per HTTP_FILTER or route patch) and it is validated once; only
// when that fails is each patch's own addition validated (see batch).
package envoyfilter

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// Status values of the pilot_envoy_filter_status metric.
const (
	StatusApplied = "applied"
	StatusError   = "error"
)

// Reporter receives what happened to EnvoyFilter patches. The zero value
// discards everything.
type Reporter struct {
	// Log, when set, gets one WARN line per patch that is skipped, naming
	// the EnvoyFilter and the patch.
	Log *slog.Logger
	// Status, when set, is called with an EnvoyFilter ("namespace/name")
	// and StatusApplied or StatusError (Istio's pilot_envoy_filter_status).
	Status func(name, status string)
}

// Context is where a resource is generated, as EnvoyFilter match.context
// names it: SIDECAR_INBOUND, SIDECAR_OUTBOUND or GATEWAY.
type Context = networking.EnvoyFilter_PatchContext

// Contexts resources are generated in.
const (
	SidecarInbound  = networking.EnvoyFilter_SIDECAR_INBOUND
	SidecarOutbound = networking.EnvoyFilter_SIDECAR_OUTBOUND
	Gateway         = networking.EnvoyFilter_GATEWAY
)

// Index is the compiled form of a PushContext's EnvoyFilters. It is
// immutable but for the record of what was already reported.
type Index struct {
	root string
	// byNS are the filters of each namespace, in application order.
	byNS map[string][]*filter
	// reported remembers (filter, patch, problem) already logged.
	reported sync.Map
	rep      Reporter
}

// filter is one compiled EnvoyFilter.
type filter struct {
	name     string // namespace/name
	id       string // name@resourceVersion/generation
	ns       string
	priority int32
	created  time.Time
	selector map[string]string
	// targets are the Gateway API Gateway names of targetRefs (nil: none).
	targets    []string
	hasTargets bool
	patches    []*patch
}

// patch is one compiled configPatch.
type patch struct {
	f     *filter
	index int
	spec  *networking.EnvoyFilter_EnvoyConfigObjectPatch
	match *networking.EnvoyFilter_EnvoyConfigObjectMatch
	op    networking.EnvoyFilter_Patch_Operation
	// value is the parsed patch value (nil for REMOVE).
	value proto.Message
	// version is the compiled proxy.proxyVersion (nil: any).
	version *regexp.Regexp
}

func (p *patch) applyTo() networking.EnvoyFilter_ApplyTo { return p.spec.GetApplyTo() }

// where names the patch in messages: "configPatches[2] (HTTP_FILTER INSERT_BEFORE)".
func (p *patch) where() string {
	return fmt.Sprintf("configPatches[%d] (%s %s)", p.index, p.applyTo(), p.op)
}

// IndexFor returns the compiled EnvoyFilters of push, compiling them on the
// first call for its set of EnvoyFilters. rep is used by that compilation
// and by every patch application through the index.
func IndexFor(push *model.PushContext, rep Reporter) *Index {
	v := push.EnvoyFilterIndex(func(filters []model.Config, root string) any {
		return Compile(filters, root, rep)
	})
	idx, _ := v.(*Index)
	return idx
}

// Compile compiles filters for a mesh whose root namespace is root,
// reporting patches that cannot be compiled and leaving them out.
func Compile(filters []model.Config, root string, rep Reporter) *Index {
	idx := &Index{root: root, byNS: map[string][]*filter{}, rep: rep}
	for i := range filters {
		c := &filters[i]
		ef, ok := c.Spec.(*networking.EnvoyFilter)
		if !ok {
			continue
		}
		f := &filter{
			name:     c.Namespace + "/" + c.Name,
			id:       c.Namespace + "/" + c.Name + "@" + c.ResourceVersion + "/" + strconv.FormatInt(c.Generation, 10),
			ns:       c.Namespace,
			priority: ef.GetPriority(),
			created:  c.CreationTimestamp,
			selector: ef.GetWorkloadSelector().GetLabels(),
		}
		for _, ref := range ef.GetTargetRefs() {
			f.hasTargets = true
			if ref.GetKind() == "Gateway" && ref.GetGroup() == "gateway.networking.k8s.io" {
				f.targets = append(f.targets, ref.GetName())
			}
		}
		for j, cp := range ef.GetConfigPatches() {
			p, field, err := compilePatch(f, j, cp)
			if err != nil {
				idx.report(f, fmt.Sprintf("configPatches[%d].%s", j, field), err)
				continue
			}
			if p != nil {
				f.patches = append(f.patches, p)
			}
		}
		idx.byNS[c.Namespace] = append(idx.byNS[c.Namespace], f)
	}
	for _, list := range idx.byNS {
		sort.SliceStable(list, func(i, j int) bool { return idx.before(list[i], list[j]) })
	}
	return idx
}

// before orders filters as they apply: priority, root namespace first,
// creation time, then namespace and name.
func (idx *Index) before(a, b *filter) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	if ar, br := a.ns == idx.root, b.ns == idx.root; ar != br {
		return ar
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.name < b.name
}

// compilePatch checks and parses one configPatch. It returns nil for a
// patch that can never apply here (WAYPOINT context), and the field at
// fault with an error for one that is wrong or unsupported.
func compilePatch(f *filter, i int, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) (*patch, string, error) {
	p := &patch{f: f, index: i, spec: cp, match: cp.GetMatch(), op: cp.GetPatch().GetOperation()}
	if p.match.GetContext() == networking.EnvoyFilter_WAYPOINT {
		return nil, "", nil // no waypoints here
	}
	switch cp.GetApplyTo() {
	case networking.EnvoyFilter_BOOTSTRAP:
		return nil, "applyTo", errors.New("BOOTSTRAP patches are applied by Istio's agent; not supported")
	}
	if v := p.match.GetProxy().GetProxyVersion(); v != "" {
		re, err := regexp.Compile(v)
		if err != nil {
			return nil, "match.proxy.proxyVersion", err
		}
		p.version = re
	}
	if !supported(cp.GetApplyTo(), p.op) {
		return nil, "patch.operation", fmt.Errorf("%s is not supported for applyTo %s", p.op, cp.GetApplyTo())
	}
	if p.op == networking.EnvoyFilter_Patch_REMOVE {
		return p, "", nil
	}
	v, err := parseValue(cp.GetApplyTo(), cp.GetPatch().GetValue())
	if err != nil {
		return nil, "patch.value", err
	}
	p.value = v
	return p, "", nil
}

// report logs problem once per (filter, where, problem) and records an error status.
func (idx *Index) report(f *filter, where string, problem error) {
	if idx == nil {
		return
	}
	key := f.id + "\x00" + where + "\x00" + problem.Error()
	if _, dup := idx.reported.LoadOrStore(key, struct{}{}); dup {
		return
	}
	if idx.rep.Log != nil {
		idx.rep.Log.Warn("EnvoyFilter patch skipped", "envoyfilter", f.name, "field", "spec."+where, "error", problem.Error())
	}
	if idx.rep.Status != nil {
		idx.rep.Status(f.name, StatusError)
	}
}

// Patches are the EnvoyFilter patches that apply to one proxy, in order.
// A nil *Patches has none; its methods return their input unchanged.
type Patches struct {
	idx     *Index
	key     string
	byApply map[networking.EnvoyFilter_ApplyTo][]*patch
}

// For returns the patches of push's EnvoyFilters that apply to proxy, nil
// when none does.
func For(proxy *model.Proxy, push *model.PushContext, rep Reporter) *Patches {
	if len(push.EnvoyFilters()) == 0 {
		return nil
	}
	return IndexFor(push, rep).For(proxy)
}

// For returns the patches that apply to proxy, nil when none does.
func (idx *Index) For(proxy *model.Proxy) *Patches {
	if idx == nil {
		return nil
	}
	var fs []*filter
	fs = append(fs, idx.selected(proxy, idx.root)...)
	if ns := proxy.ConfigNamespace(); ns != idx.root {
		fs = append(fs, idx.selected(proxy, ns)...)
	}
	if len(fs) == 0 {
		return nil
	}
	sort.SliceStable(fs, func(i, j int) bool { return idx.before(fs[i], fs[j]) })
	out := &Patches{idx: idx, byApply: map[networking.EnvoyFilter_ApplyTo][]*patch{}}
	var key strings.Builder
	for _, f := range fs {
		key.WriteString(f.id)
		for _, p := range f.patches {
			if !proxyMatches(p, proxy) {
				key.WriteString("!" + strconv.Itoa(p.index))
				continue
			}
			out.byApply[p.applyTo()] = append(out.byApply[p.applyTo()], p)
		}
		key.WriteByte(';')
	}
	if len(out.byApply) == 0 {
		return nil
	}
	out.key = key.String()
	return out
}

// selected returns the filters of ns that select proxy.
func (idx *Index) selected(proxy *model.Proxy, ns string) []*filter {
	var out []*filter
	for _, f := range idx.byNS[ns] {
		if f.selects(proxy, idx.root) {
			out = append(out, f)
		}
	}
	return out
}

// selects reports whether f's workloadSelector or targetRefs take proxy.
func (f *filter) selects(proxy *model.Proxy, root string) bool {
	if f.ns != root && f.ns != proxy.ConfigNamespace() {
		return false
	}
	labels := proxy.Labels()
	if f.hasTargets {
		// Only Gateway API Gateways can be targeted here: their
		// deployments carry the gateway-name label.
		if f.ns != proxy.ConfigNamespace() {
			return false
		}
		for _, name := range f.targets {
			if labels["gateway.networking.k8s.io/gateway-name"] == name {
				return true
			}
		}
		return false
	}
	for k, v := range f.selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// proxyMatches checks the patch's match.proxy against proxy.
func proxyMatches(p *patch, proxy *model.Proxy) bool {
	if p.version != nil && !p.version.MatchString(proxy.Metadata.IstioVersion) {
		return false
	}
	for k, want := range p.match.GetProxy().GetMetadata() {
		got, ok := metadataValue(proxy, k)
		if !ok || got != want {
			return false
		}
	}
	return true
}

// metadataValue returns a string node-metadata key of proxy. Only the keys
// meshpilot decodes are known; others never match.
func metadataValue(proxy *model.Proxy, key string) (string, bool) {
	m := proxy.Metadata
	switch key {
	case "NAMESPACE":
		return m.Namespace, m.Namespace != ""
	case "SERVICE_ACCOUNT":
		return m.ServiceAccount, m.ServiceAccount != ""
	case "CLUSTER_ID":
		return m.ClusterID, m.ClusterID != ""
	case "NETWORK":
		return m.Network, m.Network != ""
	case "ISTIO_VERSION":
		return m.IstioVersion, m.IstioVersion != ""
	case "INTERCEPTION_MODE":
		return m.InterceptionMode, m.InterceptionMode != ""
	case "WORKLOAD_NAME":
		return m.WorkloadName, m.WorkloadName != ""
	case "GENERATOR":
		return m.Generator, m.Generator != ""
	case "MESH_ID":
		return m.MeshID, m.MeshID != ""
	case "POD_PORTS":
		return m.PodPorts, m.PodPorts != ""
	}
	return "", false
}

// Key identifies the patches (the EnvoyFilters, at their versions, and the
// patches the proxy match left out): two proxies with the same Key get the
// same patched resources. It is "" for nil.
func (ps *Patches) Key() string {
	if ps == nil {
		return ""
	}
	return ps.key
}

// Has reports whether some patch applies to kind in ctx.
func (ps *Patches) Has(ctx Context, kinds ...networking.EnvoyFilter_ApplyTo) bool {
	if ps == nil {
		return false
	}
	for _, k := range kinds {
		for _, p := range ps.byApply[k] {
			if contextMatches(p, ctx) {
				return true
			}
		}
	}
	return false
}

// Filters names ("namespace/name") the EnvoyFilters with a patch of one
// of kinds that applies in ctx, in application order, each once.
func (ps *Patches) Filters(ctx Context, kinds ...networking.EnvoyFilter_ApplyTo) []string {
	if ps == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range kinds {
		for _, p := range ps.of(ctx, k) {
			if !seen[p.f.name] {
				seen[p.f.name] = true
				out = append(out, p.f.name)
			}
		}
	}
	return out
}

// of returns the patches for kind in ctx.
func (ps *Patches) of(ctx Context, kind networking.EnvoyFilter_ApplyTo) []*patch {
	if ps == nil {
		return nil
	}
	var out []*patch
	for _, p := range ps.byApply[kind] {
		if contextMatches(p, ctx) {
			out = append(out, p)
		}
	}
	return out
}

func contextMatches(p *patch, ctx Context) bool {
	c := p.match.GetContext()
	return c == networking.EnvoyFilter_ANY || c == ctx
}

// applied records that p changed a resource.
func (ps *Patches) applied(p *patch) {
	if ps.idx.rep.Status == nil {
		return
	}
	if _, dup := ps.idx.reported.LoadOrStore(p.f.id+"\x00applied", struct{}{}); !dup {
		ps.idx.rep.Status(p.f.name, StatusApplied)
	}
}

// failed reports that p could not apply to the resource named res.
func (ps *Patches) failed(p *patch, res string, err error) {
	ps.idx.report(p.f, p.where(), fmt.Errorf("%s: %w", res, err))
}

// KeyFor is Key when some patch of one of kinds applies in ctx, else "":
// a cache key part that lets proxies whose patches leave a resource type
// alone share it with proxies without patches.
func (ps *Patches) KeyFor(ctx Context, kinds ...networking.EnvoyFilter_ApplyTo) string {
	if !ps.Has(ctx, kinds...) {
		return ""
	}
	return ps.key
}

// ListenerKinds are the applyTo kinds that change listeners.
func ListenerKinds() []networking.EnvoyFilter_ApplyTo { k := listenerKinds(); return k[:] }

// RouteKinds are the applyTo kinds that change route configurations.
func RouteKinds() []networking.EnvoyFilter_ApplyTo { k := routeKinds(); return k[:] }

// ContextFor is the context of proxy's generated resources that have no
// direction: GATEWAY for routers, SIDECAR_OUTBOUND otherwise.
func ContextFor(proxy *model.Proxy) Context {
	if proxy.Type == model.Router {
		return Gateway
	}
	return SidecarOutbound
}
