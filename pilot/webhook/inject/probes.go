package inject

import (
	"encoding/json"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Probe rewriting: the kubelet's probes go to the agent's status port,
// which performs the application's original probes (ISTIO_KUBE_APP_PROBERS)
// from inside the pod, so they work under mTLS.
const (
	rewriteProbesAnnotation = "sidecar.istio.io/rewriteAppHTTPProbers"
	statusPortAnnotation    = "status.sidecar.istio.io/port"
	includeInboundAnno      = "traffic.sidecar.istio.io/includeInboundPorts"
	excludeInboundAnno      = "traffic.sidecar.istio.io/excludeInboundPorts"
	appProbersEnv           = "ISTIO_KUBE_APP_PROBERS"
)

// prober is one original probe as the agent reads it.
type prober struct {
	HTTPGet        *corev1.HTTPGetAction   `json:"httpGet,omitempty"`
	TCPSocket      *corev1.TCPSocketAction `json:"tcpSocket,omitempty"`
	GRPC           *corev1.GRPCAction      `json:"grpc,omitempty"`
	TimeoutSeconds int32                   `json:"timeoutSeconds,omitempty"`
}

// rewriteProbes is the pod's sidecar.istio.io/rewriteAppHTTPProbers
// annotation when it parses, else the values' setting.
func rewriteProbes(annotations map[string]string, def bool) bool {
	if v, ok := annotations[rewriteProbesAnnotation]; ok {
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return def
}

// proberURLs are the agent paths for a container's probes and hooks.
func proberURLs(container string) (ready, live, startup, preStop, postStart string) {
	return "/app-health/" + container + "/readyz",
		"/app-health/" + container + "/livez",
		"/app-health/" + container + "/startupz",
		"/app-lifecycle/" + container + "/prestopz",
		"/app-lifecycle/" + container + "/poststartz"
}

// rewriteAppProbes records the application probes in the proxy's env and
// points them at the agent.
func rewriteAppProbes(pod *corev1.Pod, defaultStatusPort int32) {
	sidecar := findContainerInPod(proxyContainer, pod)
	if sidecar == nil {
		return
	}
	if probers := appProbers(pod); probers != "" {
		_, reinjected := pod.Annotations[statusAnnotation]
		sidecar.Env = mergeProbersEnv(reinjected, sidecar.Env, probers)
	}
	port := int(defaultStatusPort)
	if v, ok := pod.Annotations[statusPortAnnotation]; ok {
		port, _ = strconv.Atoi(v)
	}
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name != proxyContainer {
				redirectProbes(&list[i], port)
			}
		}
	}
}

// mergeProbersEnv appends ISTIO_KUBE_APP_PROBERS, or on re-injection merges
// into the existing value (existing entries win).
func mergeProbersEnv(reinjected bool, env []corev1.EnvVar, probers string) []corev1.EnvVar {
	if reinjected {
		for i, e := range env {
			if e.Name != appProbersEnv {
				continue
			}
			old, fresh := map[string]*prober{}, map[string]*prober{}
			if json.Unmarshal([]byte(e.Value), &old) != nil || json.Unmarshal([]byte(probers), &fresh) != nil {
				return env
			}
			for k, v := range old {
				fresh[k] = v
			}
			b, err := json.Marshal(fresh)
			if err != nil {
				return env
			}
			env[i] = corev1.EnvVar{Name: appProbersEnv, Value: string(b)}
			return env
		}
	}
	return append(env, corev1.EnvVar{Name: appProbersEnv, Value: probers})
}

// appProbers is the JSON of every application probe and HTTP/TCP lifecycle
// hook, keyed by agent path, with named ports resolved; "" when none.
func appProbers(pod *corev1.Pod) string {
	included := includedPorts(pod.Annotations)
	out := map[string]*prober{}
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		if c.Name == proxyContainer {
			continue
		}
		ready, live, startup, preStop, postStart := proberURLs(c.Name)
		add := func(key string, p *prober) {
			if p = resolvePort(p, c, included); p != nil {
				out[key] = p
			}
		}
		add(ready, probeToProber(c.ReadinessProbe))
		add(live, probeToProber(c.LivenessProbe))
		add(startup, probeToProber(c.StartupProbe))
		if c.Lifecycle != nil {
			add(preStop, hookToProber(c.Lifecycle.PreStop))
			add(postStart, hookToProber(c.Lifecycle.PostStart))
		}
	}
	if len(out) == 0 {
		return ""
	}
	b, err := json.Marshal(out)
	if err != nil {
		return ""
	}
	return string(b)
}

// resolvePort turns a named port into the container's number and drops
// probes on ports outside the intercepted inbound ports.
func resolvePort(p *prober, c corev1.Container, included map[int32]bool) *prober {
	if p == nil {
		return nil
	}
	if p.GRPC != nil {
		if len(included) > 0 && !included[p.GRPC.Port] {
			return nil
		}
		return p
	}
	var port *intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = &p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = &p.TCPSocket.Port
	default:
		return nil
	}
	n := port.IntVal
	if port.Type == intstr.String {
		n = namedPort(c, port.StrVal)
	}
	if len(included) > 0 && !included[n] {
		return nil
	}
	*port = intstr.FromInt32(n)
	return p
}

func namedPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	n, _ := strconv.ParseInt(name, 10, 32)
	return int32(n)
}

// includedPorts is the set of intercepted inbound ports the annotations
// name; empty means all.
func includedPorts(annotations map[string]string) map[int32]bool {
	ports := map[int32]bool{}
	if inc := annotations[includeInboundAnno]; inc != "" {
		if inc == "*" {
			return ports
		}
		for _, s := range strings.Split(inc, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
				ports[int32(n)] = true
			}
		}
		return ports
	}
	return ports // excluded ports only shrink "all", which stays empty
}

func probeToProber(p *corev1.Probe) *prober {
	switch {
	case p == nil:
		return nil
	case p.HTTPGet != nil:
		return &prober{HTTPGet: p.HTTPGet.DeepCopy(), TimeoutSeconds: p.TimeoutSeconds}
	case p.TCPSocket != nil:
		return &prober{TCPSocket: p.TCPSocket.DeepCopy(), TimeoutSeconds: p.TimeoutSeconds}
	case p.GRPC != nil:
		return &prober{GRPC: p.GRPC.DeepCopy(), TimeoutSeconds: p.TimeoutSeconds}
	}
	return nil
}

func hookToProber(h *corev1.LifecycleHandler) *prober {
	switch {
	case h == nil:
		return nil
	case h.HTTPGet != nil:
		return &prober{HTTPGet: h.HTTPGet.DeepCopy()}
	case h.TCPSocket != nil:
		return &prober{TCPSocket: h.TCPSocket.DeepCopy()}
	}
	return nil
}

// redirectProbes points c's HTTP, TCP and gRPC probes and HTTP/TCP hooks at
// the agent on port.
func redirectProbes(c *corev1.Container, port int) {
	ready, live, startup, preStop, postStart := proberURLs(c.Name)
	c.ReadinessProbe = redirectProbe(c.ReadinessProbe, ready, port)
	c.LivenessProbe = redirectProbe(c.LivenessProbe, live, port)
	c.StartupProbe = redirectProbe(c.StartupProbe, startup, port)
	if c.Lifecycle != nil {
		c.Lifecycle.PreStop = redirectHook(c.Lifecycle.PreStop, preStop, port)
		c.Lifecycle.PostStart = redirectHook(c.Lifecycle.PostStart, postStart, port)
	}
}

func agentGet(old *corev1.HTTPGetAction, path string, port int) *corev1.HTTPGetAction {
	a := &corev1.HTTPGetAction{}
	if old != nil {
		a = old.DeepCopy()
	}
	a.Path = path
	a.Port = intstr.FromInt32(int32(port))
	if a.Scheme == corev1.URISchemeHTTPS {
		a.Scheme = corev1.URISchemeHTTP // kubelet→agent is plain HTTP
	}
	return a
}

func redirectProbe(p *corev1.Probe, path string, port int) *corev1.Probe {
	if p == nil || (p.HTTPGet == nil && p.TCPSocket == nil && p.GRPC == nil) {
		return p
	}
	out := p.DeepCopy()
	out.HTTPGet = agentGet(p.HTTPGet, path, port)
	out.TCPSocket, out.GRPC = nil, nil
	return out
}

func redirectHook(h *corev1.LifecycleHandler, path string, port int) *corev1.LifecycleHandler {
	if h == nil || (h.HTTPGet == nil && h.TCPSocket == nil) {
		return h
	}
	out := h.DeepCopy()
	out.HTTPGet = agentGet(h.HTTPGet, path, port)
	out.TCPSocket = nil
	return out
}
