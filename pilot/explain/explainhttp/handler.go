// Package explainhttp serves explain over HTTP: /debug/explain?proxyID=P&type=T&name=N
// answers, as JSON, why the connected proxy P has resource N of type T.
package explainhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/explain"
	"github.com/meshpilot/meshpilot/xds"
)

// Path is where the handler is registered.
const Path = "/debug/explain"

// maxParam bounds each query parameter; longer ones are refused.
const maxParam = 1024

// Source is what the handler reads: the ADS server's connected proxies,
// its current snapshot, and its generators (to check the proxy is served
// the resource). *xds.DiscoveryServer implements it.
type Source interface {
	ConnectedProxy(id string) (xds.ProxyView, bool)
	PushContext() *model.PushContext
	Generate(v xds.ProxyView, push *model.PushContext, typeURL string, w *model.WatchedResource) (model.Resources, error)
	// TryDebugGeneration takes a slot of the debug generations config
	// dumps share (xds.Options.MaxDebugGenerations); false when none is free.
	TryDebugGeneration() (release func(), ok bool)
}

// Handler answers GET /debug/explain?proxyID=P&type=T&name=N: 200 with the
// explain.Explanation as JSON; 400 for a missing or bad parameter; 404
// when no proxy P is connected or it is not served N; 422 when N is
// served but explain has no answer for it (a built-in cluster, a gateway
// route); 429 with Retry-After when every debug generation slot is taken
// (config dumps share them); 503 before the first snapshot.
func Handler(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "explain: GET only", http.StatusMethodNotAllowed)
			return
		}
		q := r.URL.Query()
		id, typ, name := q.Get("proxyID"), q.Get("type"), q.Get("name")
		for _, p := range [][2]string{{"proxyID", id}, {"type", typ}, {"name", name}} {
			switch {
			case p[1] == "":
				http.Error(w, fmt.Sprintf("explain: query parameter %s is required (proxyID=P&type=cds|eds|lds|rds&name=N)", p[0]), http.StatusBadRequest)
				return
			case len(p[1]) > maxParam:
				http.Error(w, fmt.Sprintf("explain: query parameter %s is %d bytes, over the %d-byte limit", p[0], len(p[1]), maxParam), http.StatusBadRequest)
				return
			}
		}
		e, status, err := Answer(src, id, typ, name)
		if err != nil {
			if status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, "explain: "+err.Error(), status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(e)
	})
}

// Answer explains resource name of type typ (cds, eds, lds, rds or a type
// URL) as connected proxy id is served it from the current snapshot. On
// failure it returns the HTTP status that fits (400, 404, 422, 429, 503).
// Generating and explaining hold a debug generation slot.
func Answer(src Source, id, typ, name string) (explain.Explanation, int, error) {
	typeURL, ok := explain.TypeURL(typ)
	if !ok {
		return explain.Explanation{}, http.StatusBadRequest, fmt.Errorf("type %q: want cds, eds, lds, rds or their type URLs", clientlog.Truncate(typ, 128))
	}
	push := src.PushContext()
	if push == nil {
		return explain.Explanation{}, http.StatusServiceUnavailable, errors.New("not ready: initial config not loaded")
	}
	v, ok := src.ConnectedProxy(id)
	if !ok {
		return explain.Explanation{}, http.StatusNotFound, fmt.Errorf("no connected proxy %q (see /debug/syncz)", clientlog.Truncate(id, 256))
	}
	release, ok := src.TryDebugGeneration()
	if !ok {
		return explain.Explanation{}, http.StatusTooManyRequests, errors.New("every debug generation slot is taken (config dumps and explains share them); retry")
	}
	defer release()
	if status, err := served(src, v, push, typeURL, name); err != nil {
		return explain.Explanation{}, status, err
	}
	e, err := explain.Explain(v.Proxy, push, typeURL, name)
	if err != nil {
		return explain.Explanation{}, http.StatusUnprocessableEntity, err
	}
	return e, http.StatusOK, nil
}

// served checks that the proxy is sent resource name of typeURL from push:
// it subscribes to the type and the generator produces the name.
func served(src Source, v xds.ProxyView, push *model.PushContext, typeURL, name string) (int, error) {
	watch, ok := v.Watch(typeURL)
	if !ok {
		return http.StatusNotFound, fmt.Errorf("proxy %s does not subscribe to %s", v.Proxy.ID, typeURL)
	}
	res, err := src.Generate(v, push, typeURL, &watch)
	if err != nil {
		return http.StatusInternalServerError, fmt.Errorf("generating %s for %s: %w", typeURL, v.Proxy.ID, err)
	}
	for _, r := range res {
		if r.GetName() == name {
			return http.StatusOK, nil
		}
	}
	return http.StatusNotFound, fmt.Errorf("proxy %s is not served %s %q", v.Proxy.ID, typeURL, clientlog.Truncate(name, 256))
}
