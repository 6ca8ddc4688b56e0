package bootstrap

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/meshpilot/meshpilot/pilot/console"
	"github.com/meshpilot/meshpilot/pilot/explain/explainhttp"
	"github.com/meshpilot/meshpilot/pilot/preview"
	"github.com/meshpilot/meshpilot/serviceregistry/multicluster"
)

// httpMux serves --httpAddr: /ready (the kubelet probes it on the pod IP),
// and /debug/* too when debug is served there (no --debugAddr and
// ENABLE_DEBUG_ON_HTTP, as istiod).
func (s *Server) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !s.discovery.Ready() {
			http.Error(w, "initial config not loaded", http.StatusServiceUnavailable)
			return
		}
		// Unlike istiod (istio/istio#61049), not ready before the webhook
		// answers: a pod taken into the Service early fails admissions.
		if !s.webhookServing() {
			http.Error(w, "admission webhook not serving yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if s.opts.DebugAddr == "" && s.opts.EnableDebugOnHTTP {
		s.debugMux(mux)
	}
	return mux
}

// debugMux adds the debug endpoints to mux: the ADS server's (syncz,
// configz, registryz, config_dump; secrets redacted), POST /debug/preview
// (what a change would send each proxy, docs/preview.md) and Go's profiles,
// where istiod serves them too (go tool pprof http://HOST:PORT/debug/pprof/profile).
// They reveal the mesh's configuration, hence --debugAddr (the chart binds
// it to 127.0.0.1). The operator console (/ui/) shows the same and goes
// where they go.
//
// All of them sit behind one cross-origin protection, the console's: a
// browser's non-safe request (POST, PUT, DELETE, ...) from another site
// or origin (Sec-Fetch-Site, else Origin against Host) is refused with 403
// before any handler runs, so a page the operator visits cannot make their
// browser act on a debug port it can reach. Nothing changes state on GET
// or HEAD (force_disconnect is POST only, unlike istiod which takes any
// method); requests without those headers (curl, istioctl) pass.
func (s *Server) debugMux(mux *http.ServeMux) *http.ServeMux {
	inner := http.NewServeMux()
	s.discovery.RegisterDebug(inner)
	pv := preview.New(preview.Options{Server: s.discovery, Env: s.env, Validator: s.validator, Log: s.log.With("component", "preview")})
	pv.Register(inner)
	inner.Handle(explainhttp.Path, explainhttp.Handler(s.discovery))
	console.New(s.consoleSources(pv), s.log.With("component", "console")).Register(inner)
	inner.HandleFunc("GET /debug/clusterz", s.clusterz)
	inner.HandleFunc("/debug/pprof/", pprof.Index)
	inner.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	inner.HandleFunc("/debug/pprof/profile", pprof.Profile)
	inner.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	inner.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", http.NewCrossOriginProtection().Handler(inner))
	return mux
}

// consoleSources are the console's data: the ADS server's proxies and
// convergence histogram, every config object with its config status, and
// the explain and preview engines.
func (s *Server) consoleSources(pv *preview.Previewer) console.Sources {
	src := console.FromDiscovery(s.discovery, s.reg)
	if tracker := s.discovery.ConfigStatus(); tracker != nil {
		src.Configs = func() []console.ConfigRow { return console.StatusRows(s.configStore, tracker) }
	}
	src.Explain = func(_ context.Context, proxyID, typ, name string) (any, error) {
		e, _, err := explainhttp.Answer(s.discovery, proxyID, typ, name)
		if err != nil {
			return nil, err
		}
		return e, nil
	}
	src.Preview = func(ctx context.Context, yaml []byte) (any, error) {
		return pv.Preview(ctx, preview.Request{YAML: yaml})
	}
	return src
}

// clusterz is /debug/clusterz, as istiod's: the local cluster, then each
// remote cluster with the secret defining it and its sync status (never
// the kubeconfig).
func (s *Server) clusterz(w http.ResponseWriter, _ *http.Request) {
	out := []multicluster.ClusterInfo{{ID: s.opts.ClusterID, Status: multicluster.StatusSynced}}
	if s.kube != nil {
		if !s.kube.registry.HasSynced() {
			out[0].Status = multicluster.StatusSyncing
		}
		out = append(out, s.kube.remotes.Clusters()...)
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}
