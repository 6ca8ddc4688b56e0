package support

import (
	"log/slog"
	"sync"

	"google.golang.org/protobuf/proto"
)

// Reporter logs the unsupported fields of accepted configs, once per object
// version, and keeps their count over the current configs for a gauge
// (meshpilot_config_unsupported_fields). It is safe for concurrent use.
type Reporter struct {
	log   *slog.Logger
	gauge func(float64)

	mu      sync.Mutex
	objects map[objectKey]reported
	total   int
}

type objectKey struct{ kind, namespace, name string }

// reported is what was last reported for one object.
type reported struct {
	version string
	count   int
}

// NewReporter returns a Reporter logging to log (nil: discard) and setting
// gauge (nil: none) to the number of unsupported field usages after each change.
func NewReporter(log *slog.Logger, gauge func(float64)) *Reporter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if gauge == nil {
		gauge = func(float64) {}
	}
	return &Reporter{log: log, gauge: gauge, objects: map[objectKey]reported{}}
}

// Accept records that the object o was accepted. The first time its
// Version is seen it logs one warning per field Check reports. It returns
// the object's count of such fields.
func (r *Reporter) Accept(o Object) int {
	k := objectKey{o.Kind, o.Namespace, o.Name}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.objects[k]; ok && prev.version == o.Version {
		return prev.count
	}
	found := check(o.Kind, o.Spec)
	for _, f := range found {
		attrs := []any{"kind", o.Kind, "namespace", o.Namespace, "name", o.Name, "field", f.path,
			"support", f.level.String(), "detail", f.text}
		if o.Source != "" {
			attrs = append(attrs, "origin", o.Source)
		}
		r.log.Warn("config field not applied", attrs...)
	}
	r.total += len(found) - r.objects[k].count
	r.objects[k] = reported{version: o.Version, count: len(found)}
	r.gauge(float64(r.total))
	return len(found)
}

// Remove forgets an object that is no longer part of the config.
func (r *Reporter) Remove(kind, namespace, name string) {
	k := objectKey{kind, namespace, name}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.objects[k]
	if !ok {
		return
	}
	delete(r.objects, k)
	r.total -= prev.count
	r.gauge(float64(r.total))
}

// Object is one accepted config.
type Object struct {
	Kind, Namespace, Name string
	// Version changes whenever the spec does (resourceVersion, generation
	// or a content hash); warnings are logged once per version.
	Version string
	// Source says where the object came from ("bookinfo.yaml#2"), logged
	// as "origin"; optional.
	Source string
	Spec   proto.Message
}

// Replace makes objs the whole current config: it accepts each and forgets
// every object not among them. It returns the total count.
func (r *Reporter) Replace(objs []Object) int {
	keep := make(map[objectKey]bool, len(objs))
	for _, o := range objs {
		keep[objectKey{o.Kind, o.Namespace, o.Name}] = true
		r.Accept(o)
	}
	r.mu.Lock()
	var gone []objectKey
	for k := range r.objects {
		if !keep[k] {
			gone = append(gone, k)
		}
	}
	r.mu.Unlock()
	for _, k := range gone {
		r.Remove(k.kind, k.namespace, k.name)
	}
	return r.Total()
}

// Total returns the number of unsupported field usages in the current config.
func (r *Reporter) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}
