package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	meshconfig "istio.io/api/mesh/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// Annotations and env vars of the post-processing steps.
const (
	prometheusMergeAnnotation  = "prometheus.istio.io/merge-metrics"
	prometheusEnv              = "ISTIO_PROMETHEUS_ANNOTATIONS"
	initBeforeProxyAnnotation  = "sidecar.istio.io/init-containers-before-proxy"
	interceptionModeAnnotation = "sidecar.istio.io/interceptionMode"
	autoImage                  = "auto"
)

// status is the JSON of the sidecar.istio.io/status annotation.
type status struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
}

// overrides is the JSON of the proxy.istio.io/overrides annotation:
// the user's own definitions of injected containers.
type overrides struct {
	Containers     []corev1.Container `json:"containers,omitempty"`
	InitContainers []corev1.Container `json:"initContainers,omitempty"`
}

func parseStatus(raw string) (status, bool) {
	var st status
	if raw == "" || json.Unmarshal([]byte(raw), &st) != nil {
		return st, false
	}
	return st, true
}

// reapplyOverrides merges the user's own definition of an injected
// container (e.g. an istio-proxy container in the pod spec) back over the
// injected one, so user settings win; they are saved in an annotation for
// re-injection.
func reapplyOverrides(ctx context.Context, final, original, templatePod *corev1.Pod, pc *meshconfig.ProxyConfig) (*corev1.Pod, error) {
	var saved overrides
	if raw, ok := original.Annotations[overridesAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &saved); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", overridesAnnotation, err)
		}
	}
	prev, injected := parseStatus(original.Annotations[statusAnnotation])
	_, alreadyInjected := original.Annotations[statusAnnotation]
	var found overrides
	apply := func(name string, init bool) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var match *corev1.Container
		if init {
			if injected && contains(prev.InitContainers, name) {
				return nil
			}
			match = findContainer(name, saved.InitContainers)
			if match == nil {
				match = findContainer(name, original.Spec.Containers)
			}
			if match == nil {
				match = findContainer(name, original.Spec.InitContainers)
			}
		} else {
			if injected && contains(prev.Containers, name) {
				return nil
			}
			match = findContainer(name, saved.Containers)
			if match == nil {
				match = findContainer(name, original.Spec.Containers)
			}
		}
		if match == nil {
			return nil
		}
		c := *match.DeepCopy()
		if c.Image == autoImage {
			c.Image = ""
		}
		patch := corev1.Pod{}
		if init {
			found.InitContainers = append(found.InitContainers, c)
			patch.Spec.Containers = []corev1.Container{} // null would delete them
			patch.Spec.InitContainers = []corev1.Container{c}
		} else {
			found.Containers = append(found.Containers, c)
			patch.Spec.Containers = []corev1.Container{c}
		}
		js, err := json.Marshal(patch)
		if err != nil {
			return err
		}
		m := map[string]any{}
		if err := json.Unmarshal(js, &m); err != nil {
			return err
		}
		p, err := overlayMap(final, m)
		if err != nil {
			return fmt.Errorf("container %s override: %w", name, err)
		}
		final = p
		return nil
	}
	for _, c := range templatePod.Spec.Containers {
		if err := apply(c.Name, false); err != nil {
			return nil, err
		}
	}
	for _, c := range templatePod.Spec.InitContainers {
		if err := apply(c.Name, true); err != nil {
			return nil, err
		}
	}
	if !alreadyInjected && (len(found.Containers) > 0 || len(found.InitContainers) > 0) {
		js, err := json.Marshal(found)
		if err != nil {
			return nil, err
		}
		if final.Annotations == nil {
			final.Annotations = map[string]string{}
		}
		final.Annotations[overridesAnnotation] = string(js)
	}
	adjustInitUser(final, original, pc)
	return final, nil
}

// adjustInitUser makes the iptables setup follow a RunAsUser/RunAsGroup the
// user set on their istio-proxy container.
func adjustInitUser(final, original *corev1.Pod, pc *meshconfig.ProxyConfig) {
	user := findContainerInPod(proxyContainer, original)
	if user == nil || user.SecurityContext == nil ||
		(user.SecurityContext.RunAsUser == nil && user.SecurityContext.RunAsGroup == nil) {
		return
	}
	init := findContainer(initContainer, final.Spec.InitContainers)
	if init == nil {
		init = findContainer(validationContainer, final.Spec.InitContainers)
	}
	if init == nil {
		return
	}
	tproxy := pc.GetInterceptionMode() == meshconfig.ProxyConfig_TPROXY ||
		final.Annotations[interceptionModeAnnotation] == "TPROXY"
	if tproxy && user.SecurityContext.RunAsUser != nil {
		if sc := findContainerInPod(proxyContainer, final); sc != nil && sc.SecurityContext != nil {
			zero := int64(0)
			sc.SecurityContext.RunAsUser = &zero
		}
	}
	if !tproxy && init.Name == validationContainer {
		if init.SecurityContext == nil {
			init.SecurityContext = &corev1.SecurityContext{}
		}
		if user.SecurityContext.RunAsUser != nil {
			init.SecurityContext.RunAsUser = user.SecurityContext.RunAsUser
		}
		if user.SecurityContext.RunAsGroup != nil {
			init.SecurityContext.RunAsGroup = user.SecurityContext.RunAsGroup
		}
	}
	if user.SecurityContext.RunAsUser == nil || *user.SecurityContext.RunAsUser == 0 {
		return
	}
	for i := 0; i+1 < len(init.Args); i++ {
		if init.Args[i] == "-u" {
			init.Args[i+1] = strconv.FormatInt(*user.SecurityContext.RunAsUser, 10)
			return
		}
	}
}

// postProcess does what the templates cannot: cluster/network env, the
// Prometheus merge, probe rewriting, the status annotation and ordering.
func (i *Injector) postProcess(pod, templatePod *corev1.Pod, req *request) error {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if sc := findContainerInPod(proxyContainer, pod); sc != nil && len(req.proxyEnvs) > 0 {
		var env []corev1.EnvVar
		for _, e := range sc.Env {
			if _, ok := req.proxyEnvs[e.Name]; !ok {
				env = append(env, e)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(req.proxyEnvs)) {
			env = append(env, corev1.EnvVar{Name: k, Value: req.proxyEnvs[k]})
		}
		sc.Env = env
	}
	if err := prometheusMerge(pod, i.mesh); err != nil {
		return err
	}
	if rewriteProbes(pod.Annotations, i.config.boolValue("sidecarInjectorWebhook", "rewriteAppHTTPProbe")) {
		rewriteAppProbes(pod, i.mesh.GetDefaultConfig().GetStatusPort())
	}
	if nw, ok := req.proxyEnvs["ISTIO_META_NETWORK"]; ok {
		pod.Labels[networkLabel] = nw
	}
	pod.Annotations[statusAnnotation] = injectionStatus(templatePod.Spec, i.revision)
	for k, v := range i.config.InjectedAnnotations {
		pod.Annotations[k] = v
	}
	i.reorder(pod, req)
	return nil
}

func injectionStatus(spec corev1.PodSpec, revision string) string {
	st := status{Revision: revision}
	if st.Revision == "" {
		st.Revision = "default"
	}
	for _, c := range spec.InitContainers {
		st.InitContainers = append(st.InitContainers, c.Name)
	}
	for _, c := range spec.Containers {
		st.Containers = append(st.Containers, c.Name)
	}
	for _, v := range spec.Volumes {
		st.Volumes = append(st.Volumes, v.Name)
	}
	for _, s := range spec.ImagePullSecrets {
		st.ImagePullSecrets = append(st.ImagePullSecrets, s.Name)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// reorder puts the proxy last among containers (first when the application
// waits for it), and orders init containers: with a native sidecar
// iptables setup, then the proxy, then the rest; otherwise iptables setup
// last so other init containers keep their network.
func (i *Injector) reorder(pod *corev1.Pod, req *request) {
	hold := req.proxyConfig.GetHoldApplicationUntilProxyStarts().GetValue() ||
		i.config.boolValue("global", "proxy", "holdApplicationUntilProxyStarts")
	if hold {
		pod.Spec.Containers = moveFirst(pod.Spec.Containers, proxyContainer)
	} else {
		pod.Spec.Containers = moveLast(pod.Spec.Containers, proxyContainer)
	}
	var before []string
	seen := map[string]bool{}
	for _, n := range strings.Split(pod.Annotations[initBeforeProxyAnnotation], ",") {
		if n != "" && !seen[n] {
			before, seen[n] = append(before, n), true
		}
	}
	ic := pod.Spec.InitContainers
	if findContainer(proxyContainer, ic) != nil {
		// One pass, whatever the number of names the annotation lists.
		front := append([]string{initContainer, validationContainer}, before...)
		ic = orderFirst(ic, append(front, proxyContainer, coreDumpContainer))
	} else {
		ic = moveFirst(ic, validationContainer)
		ic = moveLast(ic, initContainer)
		ic = moveLast(ic, coreDumpContainer)
	}
	pod.Spec.InitContainers = ic
}

// promKey is Prometheus's label-name sanitization of an annotation key, so
// prometheus.io/port, prometheus.io.port and prometheus-io/port are one.
func promKey(k string) string {
	b := []byte(k)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

func prometheusPort(pod *corev1.Pod) (string, bool) {
	for k, v := range pod.Annotations {
		if promKey(k) == "prometheus_io_port" {
			return v, true
		}
	}
	return "", false
}

func clearPrometheusAnnotations(pod *corev1.Pod) {
	for k := range pod.Annotations {
		switch promKey(k) {
		case "prometheus_io_port", "prometheus_io_path", "prometheus_io_scrape":
			delete(pod.Annotations, k)
		}
	}
}

// prometheusMerge points the prometheus.io annotations at the agent, which
// merges the application's metrics (saved in ISTIO_PROMETHEUS_ANNOTATIONS)
// with Envoy's.
func prometheusMerge(pod *corev1.Pod, mesh *meshconfig.MeshConfig) error {
	scrape := true
	for k, v := range pod.Annotations {
		if promKey(k) == "prometheus_io_scrape" {
			if b, err := strconv.ParseBool(v); err == nil {
				scrape = b
			}
		}
	}
	merge := true
	if v, ok := pod.Annotations[prometheusMergeAnnotation]; ok {
		if b, err := strconv.ParseBool(v); err == nil {
			merge = b
		}
	} else if mesh.GetEnablePrometheusMerge() != nil {
		merge = mesh.GetEnablePrometheusMerge().GetValue()
	}
	if !scrape || !merge {
		return nil
	}
	target := strconv.Itoa(int(mesh.GetDefaultConfig().GetStatusPort()))
	if cur, ok := prometheusPort(pod); ok && cur == target {
		return nil
	}
	var cfg struct {
		Scrape string `json:"scrape"`
		Path   string `json:"path"`
		Port   string `json:"port"`
	}
	for k, v := range pod.Annotations {
		switch promKey(k) {
		case "prometheus_io_port":
			cfg.Port = v
		case "prometheus_io_scrape":
			cfg.Scrape = v
		case "prometheus_io_path":
			cfg.Path = v
		}
	}
	if sc := findContainerInPod(proxyContainer, pod); sc != nil && (cfg.Scrape != "" || cfg.Path != "" || cfg.Port != "") {
		b, err := json.Marshal(cfg)
		if err != nil {
			return fmt.Errorf("env %s: %w", prometheusEnv, err)
		}
		sc.Env = append(sc.Env, corev1.EnvVar{Name: prometheusEnv, Value: string(b)})
	}
	clearPrometheusAnnotations(pod)
	pod.Annotations["prometheus.io/port"] = target
	pod.Annotations["prometheus.io/path"] = "/stats/prometheus"
	pod.Annotations["prometheus.io/scrape"] = "true"
	return nil
}
