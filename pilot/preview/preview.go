// Package preview answers "what would this change do before I apply it?":
// given Istio objects to create or replace and objects to delete, it
// validates them as the file source and the admission webhook do, builds
// the snapshot the change would give (the current config store with the
// change overlaid, no resource cache), generates what every connected
// proxy would be sent, before and after, and reports per proxy and xDS
// type the resources added, removed and changed, field by field. Nothing
// is applied: the served config, the resource cache and the push counters
// do not move, and no proxy is pushed.
package preview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/file"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
	"github.com/meshpilot/meshpilot/xds"
)

// Defaults of Options.
const (
	DefaultMaxBody    = 1 << 20
	DefaultMaxObjects = 50
	DefaultWorkers    = 2
	DefaultMaxChanges = 100
	// DefaultTimeout is the deadline of one preview.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxProxies is how many proxies one preview compares.
	DefaultMaxProxies = 100
	// DefaultMaxGeneratedBytes bounds the bytes of resources one preview
	// generates, before and after the change, over all proxies.
	DefaultMaxGeneratedBytes = 256 << 20
	// DefaultMaxResultBytes bounds the differences one preview lists
	// (resource names and changed fields, roughly the answer's size).
	DefaultMaxResultBytes = 4 << 20
)

// Server is what a preview needs of the ADS server: the snapshot in force,
// the connected proxies and a generation that sends and caches nothing
// (xds.DiscoveryServer).
type Server interface {
	PushContext() *model.PushContext
	ConnectedProxies() []xds.ProxyView
	Generate(v xds.ProxyView, push *model.PushContext, typeURL string, w *model.WatchedResource) (model.Resources, error)
}

// Options configure a Previewer. Server, Env and Validator are required.
type Options struct {
	Server Server
	// Env is the server's environment; only read, through a cache-less copy.
	Env *model.Environment
	// Validator is the file source's and webhook's (validation.New).
	Validator *validation.Validator
	Log       *slog.Logger
	// MaxBody bounds a request's YAML bytes; MaxObjects the objects it
	// creates, replaces or deletes; Workers the proxies generated
	// concurrently; MaxChanges the changes listed per resource.
	MaxBody    int64
	MaxObjects int
	Workers    int
	MaxChanges int
	// Timeout is the deadline of one preview; MaxProxies the proxies it
	// compares; MaxGeneratedBytes the bytes of resources it generates;
	// MaxResultBytes the bytes of differences it lists. When one runs
	// out, the preview stops and answers what it compared, marked
	// Result.Partial. Zero takes the Default.
	Timeout           time.Duration
	MaxProxies        int
	MaxGeneratedBytes int64
	MaxResultBytes    int64
}

// Previewer computes previews, one at a time.
type Previewer struct {
	opts Options
	log  *slog.Logger
	// busy holds a token while a preview runs: a second one is refused
	// (ErrBusy) rather than queued, so previews cannot pile up.
	busy chan struct{}
}

// ErrBusy is returned while another preview is being computed.
var ErrBusy = errors.New("another preview is being computed; retry")

// ErrNotReady is returned before the server has its first snapshot.
var ErrNotReady = errors.New("not ready: initial config not loaded")

// RequestError is a request that cannot be previewed at all (too large,
// a malformed delete); validation errors of objects are in Result instead.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// New returns a Previewer.
func New(opts Options) *Previewer {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxObjects <= 0 {
		opts.MaxObjects = DefaultMaxObjects
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.MaxChanges <= 0 {
		opts.MaxChanges = DefaultMaxChanges
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxProxies <= 0 {
		opts.MaxProxies = DefaultMaxProxies
	}
	if opts.MaxGeneratedBytes <= 0 {
		opts.MaxGeneratedBytes = DefaultMaxGeneratedBytes
	}
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = DefaultMaxResultBytes
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Previewer{opts: opts, log: log, busy: make(chan struct{}, 1)}
}

// Request is a change to preview.
type Request struct {
	// YAML holds Istio objects to create or replace ("---"-separated).
	YAML []byte
	// Delete names objects to delete, each "Kind/namespace/name".
	Delete []string
	// Proxies, when set, limits the preview to these connected proxies
	// (connection IDs or node IDs).
	Proxies []string
}

// Result is a preview.
type Result struct {
	// Valid is false when an object failed validation; then Errors says
	// why, naming object and field, and nothing else is computed.
	Valid  bool     `json:"valid"`
	Errors []string `json:"errors,omitempty"`
	// Objects are the changes previewed.
	Objects []ObjectChange `json:"objects,omitempty"`
	// ProxiesChecked counts the connected proxies compared.
	ProxiesChecked int `json:"proxiesChecked"`
	// Partial says the preview ran out of its deadline or a budget
	// (Options) before comparing every proxy: Proxies lists the changes
	// of the ProxiesChecked proxies compared, and PartialReason says
	// which budget ran out.
	Partial       bool   `json:"partial,omitempty"`
	PartialReason string `json:"partialReason,omitempty"`
	// Proxies are those that would receive a change, by connection ID.
	Proxies []ProxyDiff `json:"proxies"`
	// Summary says in one line what the change would do.
	Summary string `json:"summary"`
}

// ObjectChange is one object of the change: Action is create, update or delete.
type ObjectChange struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Action    string `json:"action"`
}

// ProxyDiff is what one proxy would receive, by type in push order.
type ProxyDiff struct {
	ConnectionID string     `json:"connectionId"`
	NodeID       string     `json:"nodeId"`
	Types        []TypeDiff `json:"types"`
}

// Preview validates req and computes what it would change. A *RequestError
// or ErrBusy means nothing was computed; ctx cancels the work.
func (p *Previewer) Preview(ctx context.Context, req Request) (*Result, error) {
	select {
	case p.busy <- struct{}{}:
	default:
		return nil, ErrBusy
	}
	// The token goes back when the preview's last generation ends, which
	// may be after Preview returned a partial answer (compare).
	var once sync.Once
	release := func() { once.Do(func() { <-p.busy }) }
	handedOver := false
	defer func() {
		if !handedOver {
			release()
		}
	}()
	ctx, cancel := context.WithTimeoutCause(ctx, p.opts.Timeout, errDeadline)
	defer cancel()
	start := time.Now()
	live := p.opts.Server.PushContext()
	if live == nil {
		return nil, ErrNotReady
	}
	if int64(len(req.YAML)) > p.opts.MaxBody {
		return nil, &RequestError{fmt.Sprintf("change of %d bytes is over the %d-byte limit", len(req.YAML), p.opts.MaxBody)}
	}
	// Bound validation work before any: every document costs a check.
	if n := documents(req.YAML); n > p.opts.MaxObjects {
		return nil, &RequestError{fmt.Sprintf("change of %d YAML documents is over the limit of %d", n, p.opts.MaxObjects)}
	}
	base := p.opts.Env.ConfigStore
	ov, objects, errs, err := p.overlay(base, req)
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		p.log.Info("preview refused: invalid change", "objects", len(objects), clientlog.Message("errors", strings.Join(errs, "; ")))
		return &Result{Valid: false, Errors: errs, Objects: objects, Proxies: []ProxyDiff{},
			Summary: "invalid: nothing computed"}, nil
	}
	updated := make(map[model.ConfigKey]struct{}, len(ov.put)+len(ov.deleted))
	for k := range ov.put {
		updated[k] = struct{}{}
	}
	for k := range ov.deleted {
		updated[k] = struct{}{}
	}
	// Both snapshots from cache-less copies of the environment: neither
	// reads nor fills the server's cache. Each reuses its predecessor's
	// indexes of the kinds the change does not touch, as a push would:
	// before is the served snapshot with the touched kinds read again from
	// the store, after is before with the change, so the two differ only
	// by the change, and compiled EnvoyFilters (whose first use reports
	// pilot_envoy_filter_status) are the served snapshot's.
	pr := &model.PushRequest{Full: true, ConfigsUpdated: updated, Reason: map[model.TriggerReason]int{model.ReasonDebugTrigger: 1}}
	before := model.NewPushContext(p.opts.Env.WithConfigStore(base), live, pr)
	after := model.NewPushContext(p.opts.Env.WithConfigStore(ov), before, pr)

	proxies := selectProxies(p.opts.Server.ConnectedProxies(), req.Proxies)
	handedOver = true
	diffs, checked, reason := p.compare(ctx, proxies, before, after, release)
	res := &Result{Valid: true, Objects: objects, ProxiesChecked: checked, Proxies: diffs}
	switch {
	case reason != "":
		res.Partial, res.PartialReason = true, reason
		res.Summary = fmt.Sprintf("partial: %d of the %d proxies compared (of %d selected) would receive a change; %s",
			len(diffs), checked, len(proxies), reason)
	case len(diffs) == 0:
		res.Summary = fmt.Sprintf("no change: none of the %d connected proxies would receive a change", len(proxies))
	default:
		res.Summary = fmt.Sprintf("%d of %d connected proxies would receive a change", len(diffs), len(proxies))
	}
	p.log.Info("preview computed", "objects", len(objects), "proxies", len(proxies), "checked", checked,
		"changed", len(diffs), "partial", reason, "duration", time.Since(start))
	return res, nil
}

// errDeadline is the cause of a preview's own deadline (Options.Timeout).
var errDeadline = errors.New("preview deadline")

// budget counts what one preview spent; the first budget to run out
// cancels the comparison with its reason.
type budget struct {
	maxGenerated, maxResult int64
	generated, result       atomic.Int64
	stop                    context.CancelCauseFunc
}

// exhausted is the cause of a cancellation by a budget; its text is the
// answer's partialReason.
type exhausted struct{ reason string }

func (e *exhausted) Error() string { return e.reason }

// spendGenerated adds n generated bytes; false when that is over budget.
func (b *budget) spendGenerated(n int64) bool {
	if b.generated.Add(n) > b.maxGenerated {
		b.stop(&exhausted{fmt.Sprintf("generation budget: over %d bytes of resources generated (MaxGeneratedBytes)", b.maxGenerated)})
		return false
	}
	return true
}

// spendResult adds n bytes of listed differences; false when that is over budget.
func (b *budget) spendResult(n int64) bool {
	if b.result.Add(n) > b.maxResult {
		b.stop(&exhausted{fmt.Sprintf("answer budget: over %d bytes of differences listed (MaxResultBytes)", b.maxResult)})
		return false
	}
	return true
}

// overlay validates req's objects and deletes against base and returns the
// overlaid store; errs are validation errors naming object and field.
func (p *Previewer) overlay(base model.ConfigStore, req Request) (*overlay, []ObjectChange, []string, error) {
	ov := &overlay{base: base, put: map[model.ConfigKey]model.Config{}, deleted: map[model.ConfigKey]bool{}}
	configs, docErrs := file.Parse("request", req.YAML, p.opts.Validator)
	if n := len(configs) + len(req.Delete); n > p.opts.MaxObjects {
		return nil, nil, nil, &RequestError{fmt.Sprintf("change of %d objects is over the limit of %d", n, p.opts.MaxObjects)}
	}
	var (
		objects []ObjectChange
		errs    []string
	)
	for _, e := range docErrs {
		errs = append(errs, clientlog.Truncate(e.Error(), clientlog.MaxMessage))
	}
	seen := map[model.ConfigKey]bool{}
	for _, c := range configs {
		k := c.Key()
		what := fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name)
		switch {
		case seen[k]:
			errs = append(errs, fmt.Sprintf("%s: %s: given twice in the change", c.Source, what))
			continue
		case unsupported(k.Kind) != "":
			errs = append(errs, fmt.Sprintf("%s: %s: kind: %s cannot be previewed yet: %s", c.Source, what, k.Kind, unsupported(k.Kind)))
			continue
		}
		seen[k] = true
		action := "create"
		if old, ok := find(base, k); ok {
			action = "update"
			c.Generation = old.Generation + 1
			c.CreationTimestamp = old.CreationTimestamp
		}
		ov.put[k] = c
		objects = append(objects, ObjectChange{Kind: string(k.Kind), Namespace: k.Namespace, Name: k.Name, Action: action})
	}
	for i, d := range req.Delete {
		k, err := parseKey(d)
		if err != nil {
			return nil, nil, nil, &RequestError{fmt.Sprintf("delete[%d] %q: %v", i, clientlog.Truncate(d, 256), err)}
		}
		what := fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name)
		switch {
		case seen[k]:
			errs = append(errs, fmt.Sprintf("delete[%d]: %s: also given to create or replace", i, what))
			continue
		case unsupported(k.Kind) != "":
			errs = append(errs, fmt.Sprintf("delete[%d]: %s: kind: %s cannot be previewed yet: %s", i, what, k.Kind, unsupported(k.Kind)))
			continue
		}
		if _, ok := find(base, k); !ok {
			errs = append(errs, fmt.Sprintf("delete[%d]: %s: no such object", i, what))
			continue
		}
		seen[k] = true
		ov.deleted[k] = true
		objects = append(objects, ObjectChange{Kind: string(k.Kind), Namespace: k.Namespace, Name: k.Name, Action: "delete"})
	}
	if len(errs) == 0 && len(objects) == 0 {
		errs = append(errs, "the change holds no object: give Istio objects as YAML, or delete=Kind/namespace/name")
	}
	return ov, objects, errs, nil
}

// selectProxies keeps the proxies named in ids (all when ids is empty).
func selectProxies(all []xds.ProxyView, ids []string) []xds.ProxyView {
	if len(ids) == 0 {
		return all
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := all[:0:0]
	for _, v := range all {
		if want[v.ConnectionID] || want[v.Proxy.ID] {
			out = append(out, v)
		}
	}
	return out
}

// unsupported says why changes of kind cannot be previewed, "" when they can.
func unsupported(kind model.Kind) string {
	switch kind {
	case model.KindServiceEntry, model.KindWorkloadEntry:
		return "services and workloads come from the registries, not the config store"
	case model.KindEnvoyFilter:
		return "compiling EnvoyFilter patches reports pilot_envoy_filter_status, which a preview must not move"
	}
	return ""
}

// documents counts the "---"-separated documents of data (an upper bound:
// a separator inside a block scalar counts too).
func documents(data []byte) int {
	n := 1 + bytes.Count(data, []byte("\n---"))
	if bytes.HasPrefix(data, []byte("---")) {
		n++
	}
	return n
}

// parseKey reads "Kind/namespace/name".
func parseKey(s string) (model.ConfigKey, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return model.ConfigKey{}, errors.New("want Kind/namespace/name")
	}
	return model.ConfigKey{Kind: model.Kind(parts[0]), Namespace: parts[1], Name: parts[2]}, nil
}

// compare generates, for every proxy and type it watches, before and after,
// on at most Workers goroutines, and returns the proxies with a difference
// among the checked ones compared in full. When the deadline passes, ctx
// is cancelled or a budget runs out, it stops and returns at once with
// the reason (generations under way are left to end by themselves; their
// results are dropped). release is called when the last worker is done.
func (p *Previewer) compare(ctx context.Context, proxies []xds.ProxyView, before, after *model.PushContext, release func()) (diffs []ProxyDiff, checked int, reason string) {
	selected := len(proxies)
	if selected > p.opts.MaxProxies {
		proxies = proxies[:p.opts.MaxProxies]
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	b := &budget{maxGenerated: p.opts.MaxGeneratedBytes, maxResult: p.opts.MaxResultBytes, stop: stop}
	var (
		mu     sync.Mutex
		found  []ProxyDiff
		done   int
		closed bool
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(p.opts.Workers, len(proxies)) {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					continue
				}
				d, complete := p.compareProxy(ctx, proxies[i], before, after, b)
				mu.Lock()
				if complete && !closed {
					done++
					if d != nil {
						found = append(found, *d)
					}
				}
				mu.Unlock()
			}
		})
	}
	go func() {
		defer close(next)
		for i := range proxies {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		// Released before finished: a preview answered in full has given
		// its token back, so the caller's next preview is not refused.
		release()
		close(finished)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
	}
	mu.Lock()
	closed = true
	diffs, checked = append([]ProxyDiff{}, found...), done
	mu.Unlock()
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].ConnectionID < diffs[j].ConnectionID })
	var ex *exhausted
	switch cause := context.Cause(ctx); {
	case cause == nil && checked == selected:
	case errors.As(cause, &ex):
		reason = ex.reason
	case errors.Is(cause, errDeadline):
		reason = fmt.Sprintf("deadline of %v reached (Timeout)", p.opts.Timeout)
	case errors.Is(cause, context.DeadlineExceeded):
		reason = "deadline of the request reached"
	case cause != nil:
		reason = "cancelled: " + cause.Error()
	default:
		reason = fmt.Sprintf("proxy budget: the first %d of the %d selected proxies compared (MaxProxies)", len(proxies), selected)
	}
	return diffs, checked, reason
}

// compareProxy returns v's differences, or nil when it would receive
// none; complete is false when ctx ended or a budget ran out first. A
// generator that panics fails this proxy's preview, not the server.
func (p *Previewer) compareProxy(ctx context.Context, v xds.ProxyView, before, after *model.PushContext, b *budget) (out *ProxyDiff, complete bool) {
	d := &ProxyDiff{ConnectionID: v.ConnectionID, NodeID: v.Proxy.ID}
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("preview generation panicked", clientlog.String("conn", v.ConnectionID), "panic", fmt.Sprint(r))
			d.Types = append(d.Types, TypeDiff{Type: "?", Error: fmt.Sprintf("generation panicked: %v", r)})
			out, complete = d, true
		}
	}()
	for i := range v.Watched {
		w := &v.Watched[i]
		if ctx.Err() != nil {
			return nil, false
		}
		old, errBefore := p.opts.Server.Generate(v, before, w.TypeURL, w)
		if !b.spendGenerated(resourcesSize(old)) || ctx.Err() != nil {
			return nil, false
		}
		cur, errAfter := p.opts.Server.Generate(v, after, w.TypeURL, w)
		if !b.spendGenerated(resourcesSize(cur)) || ctx.Err() != nil {
			return nil, false
		}
		td := TypeDiff{Type: strings.ToUpper(model.ShortType(w.TypeURL)), TypeURL: w.TypeURL}
		switch {
		case errAfter != nil && errBefore != nil && errAfter.Error() == errBefore.Error():
			// Failing before and after alike: no change to report.
		case errAfter != nil:
			td.Error = "after the change: " + errAfter.Error()
		case errBefore != nil:
			td.Error = "before the change (now fixed): " + errBefore.Error()
		default:
			diffResources(&td, old, cur, p.opts.MaxChanges)
		}
		if td.changed() {
			if !b.spendResult(td.size()) {
				return nil, false
			}
			d.Types = append(d.Types, td)
		}
	}
	if len(d.Types) == 0 {
		return nil, true
	}
	return d, true
}

// resourcesSize is the bytes of rs: names and encoded resources.
func resourcesSize(rs model.Resources) int64 {
	var n int64
	for _, r := range rs {
		n += int64(len(r.GetName()) + len(r.GetResource().GetValue()))
	}
	return n
}
