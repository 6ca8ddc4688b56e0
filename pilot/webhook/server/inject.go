package server

import (
	"context"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
)

// Injector answers /inject: it returns the patch that adds the sidecar to
// the pod of req, or an allowed response without a patch.
type Injector interface {
	// Inject never returns nil.
	Inject(ctx context.Context, req *admissionv1.AdmissionRequest, params InjectParams) *admissionv1.AdmissionResponse
}

// InjectParams are what the webhook's URL path says about the pods it
// sees, as Istio's injector reads them: /inject/KEY/VALUE/KEY/VALUE...
// (a value's "/" written "--slash--"), or the older
// /inject/:ENV:KEY=VALUE:ENV:KEY=VALUE.
type InjectParams struct {
	// ClusterID ("cluster") and Network ("net") name the pods' cluster and network.
	ClusterID, Network string
	// Env holds every parameter as the environment variable the injected
	// proxy gets: cluster as ISTIO_META_CLUSTER_ID, net as
	// ISTIO_META_NETWORK, any other key upper-cased.
	Env map[string]string
}

// paramEnv is the proxy variable of a path key: Istio's short keys
// mapped, any other upper-cased.
func paramEnv(k string) string {
	switch k {
	case "cluster":
		return "ISTIO_META_CLUSTER_ID"
	case "net":
		return "ISTIO_META_NETWORK"
	}
	return strings.ToUpper(k)
}

// ParseInjectPath reads the parameters of an /inject path. A key without a
// value (an odd count) is ignored, as Istio does.
func ParseInjectPath(path string) InjectParams {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(path, "/"), "/inject/")
	p := InjectParams{Env: map[string]string{}}
	if !ok || rest == "" {
		return p
	}
	var kv []string
	if strings.HasPrefix(rest, ":ENV:") {
		for _, pair := range strings.Split(rest, ":ENV:")[1:] {
			if k, v, ok := strings.Cut(pair, "="); ok && k != "" {
				kv = append(kv, k, v)
			}
		}
	} else {
		kv = strings.Split(rest, "/")
		for i := 1; i < len(kv); i += 2 {
			kv[i] = strings.ReplaceAll(kv[i], "--slash--", "/")
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		k, v := kv[i], kv[i+1]
		if k == "" {
			continue
		}
		p.Env[paramEnv(k)] = v
		switch k {
		case "cluster":
			p.ClusterID = v
		case "net":
			p.Network = v
		}
	}
	return p
}

// inject answers /inject and /inject/...
func (s *Server) inject(ctx context.Context, path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	params := ParseInjectPath(path)
	if s.opts.Injector == nil {
		s.log.Info("sidecar injection not available yet: admitting the pod unchanged",
			requestAttrs(req), "cluster", params.ClusterID, "network", params.Network)
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	return s.opts.Injector.Inject(ctx, req, params)
}
