package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// Names of the containers and annotations the engine manages.
const (
	proxyContainer      = "istio-proxy"
	initContainer       = "istio-init"
	validationContainer = "istio-validation"
	coreDumpContainer   = "enable-core-dump"

	statusAnnotation         = "sidecar.istio.io/status"
	templatesAnnotation      = "inject.istio.io/templates"
	nativeSidecarAnnotation  = "sidecar.istio.io/nativeSidecar"
	proxyImageTypeAnnotation = "sidecar.istio.io/proxyImageType"
	overridesAnnotation      = "proxy.istio.io/overrides"
	networkLabel             = "topology.istio.io/network"
)

// Injector renders the injection templates of one Config for one mesh and
// revision. Set its fields before first use; it is then safe for
// concurrent use. To follow ConfigMap changes, build a new Injector.
type Injector struct {
	config   *Config
	mesh     *meshconfig.MeshConfig
	revision string
	// NativeSidecars runs istio-proxy as a Kubernetes native sidecar (an
	// init container with restartPolicy Always), Istio's default on
	// Kubernetes ≥1.29. A pod's sidecar.istio.io/nativeSidecar annotation wins.
	NativeSidecars bool
	// CompliancePolicy is istiod's COMPLIANCE_POLICY (e.g. fips-140-3).
	CompliancePolicy string
	// OpenShift takes the proxy's UID/GID from the namespace's preallocated
	// ranges (Options.Namespace) instead of 1337.
	OpenShift bool
	// MaxContainers bounds a pod's containers, init and ephemeral
	// containers together: a pod with more is refused (injection fails and
	// the webhook's failurePolicy applies). 0 means DefaultMaxContainers.
	MaxContainers int
}

// DefaultMaxContainers is Injector.MaxContainers's default. Kubernetes sets
// no limit of its own, but its 3 MiB request bound allows some 30,000
// minimal containers. Injection cost is linear in the pod's size; the bound
// (far beyond any real pod) caps one request's work at a few hundred
// milliseconds of CPU (BenchmarkInjectContainers/10000).
const DefaultMaxContainers = 10000

// New returns an Injector with native sidecars on. The templates see mesh
// as .MeshConfig (nil means Istio's defaults; see ParseMesh); its
// defaultConfig, with a pod's proxy.istio.io/config merged over it, is
// .ProxyConfig. revision "" is the default revision.
func New(config *Config, mesh *meshconfig.MeshConfig, revision string) *Injector {
	if mesh == nil {
		mesh = &meshconfig.MeshConfig{}
	}
	if mesh.DefaultConfig == nil {
		mesh = proto.Clone(mesh).(*meshconfig.MeshConfig)
		mesh.DefaultConfig = DefaultProxyConfig()
	}
	return &Injector{config: config, mesh: mesh, revision: revision, NativeSidecars: true}
}

// Config is the injector's configuration.
func (i *Injector) Config() *Config { return i.config }

// Workload names the object whose pod template is injected (Deployment,
// StatefulSet…); the templates read it as .TypeMeta and .DeploymentMeta.
type Workload struct {
	metav1.TypeMeta
	Name      string
	Namespace string
}

// Options are the per-request inputs of Inject.
type Options struct {
	// Workload overrides what is derived from the pod's owner references.
	Workload *Workload
	// Namespace is the pod's namespace object, if known: its labels feed
	// the selection in Admit, its OpenShift annotations the proxy UID/GID.
	Namespace *corev1.Namespace
	// ProxyConfigs, when set, returns the ProxyConfig objects that apply to
	// a pod of namespace with labels, lowest precedence first
	// (model.ProxyConfigs.For): they are merged over the mesh's
	// defaultConfig, under the pod's proxy.istio.io/config annotation.
	ProxyConfigs func(namespace string, labels map[string]string) []*networkingv1beta1.ProxyConfig
	// ProxyEnvs are proxy env vars from the webhook path (server.ParseInjectPath):
	// ISTIO_META_CLUSTER_ID and ISTIO_META_NETWORK win over the values.
	ProxyEnvs map[string]string
}

// TemplateData is what the injection templates see, under Istio's names.
type TemplateData struct {
	TypeMeta                 metav1.TypeMeta
	DeploymentMeta           types.NamespacedName
	ObjectMeta               metav1.ObjectMeta
	Spec                     corev1.PodSpec
	ProxyConfig              *meshconfig.ProxyConfig
	MeshConfig               *meshconfig.MeshConfig
	Values                   map[string]any
	Revision                 string
	NativeSidecars           bool
	ProxyImage               string
	ProxyInitImage           string
	ProxyUID                 int64
	ProxyGID                 int64
	InboundTrafficPolicyMode string
	CompliancePolicy         string
}

// request is one injection's working state.
type request struct {
	pod         *corev1.Pod             // the pod as received (never modified)
	proxyConfig *meshconfig.ProxyConfig // mesh defaultConfig + the pod's proxy.istio.io/config
	proxyEnvs   map[string]string
}

// Inject is InjectContext without a deadline.
func (i *Injector) Inject(pod *corev1.Pod, opts Options) (*corev1.Pod, error) {
	return i.InjectContext(context.Background(), pod, opts)
}

// InjectContext returns pod with the sidecar injected (pod is not
// modified). It does not decide whether to inject: see
// Config.ShouldInject. The work stops, with ctx's error, once ctx ends.
func (i *Injector) InjectContext(ctx context.Context, pod *corev1.Pod, opts Options) (*corev1.Pod, error) {
	if err := i.checkSize(pod); err != nil {
		return nil, err
	}
	pod = pod.DeepCopy()
	if pod.Namespace == "" && opts.Namespace != nil {
		pod.Namespace = opts.Namespace.Name
	}
	name := podName(pod)
	var objects []*networkingv1beta1.ProxyConfig
	if opts.ProxyConfigs != nil {
		objects = opts.ProxyConfigs(pod.Namespace, pod.Labels)
	}
	pc, err := proxyConfigFor(i.mesh, objects, pod.Annotations)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	if err := validateAnnotations(pod.Annotations); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	if err := validateProxyConfig(pc); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	w := deployMeta(pod)
	if opts.Workload != nil {
		w = *opts.Workload
	}
	if err := validateIdentity(pod, w); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	req := &request{pod: pod, proxyConfig: pc, proxyEnvs: map[string]string{}}
	for k, v := range opts.ProxyEnvs {
		req.proxyEnvs[k] = v
	}
	cluster := i.config.stringValue("global", "multiCluster", "clusterName")
	network := i.config.stringValue("global", "network")
	if v := req.proxyEnvs["ISTIO_META_CLUSTER_ID"]; v != "" {
		cluster = v
	}
	if v := req.proxyEnvs["ISTIO_META_NETWORK"]; v != "" {
		network = v
	}
	if v, ok := pod.Labels[networkLabel]; ok {
		network = v
	}
	if cluster != "" {
		req.proxyEnvs["ISTIO_META_CLUSTER_ID"] = cluster
	}
	if network != "" {
		req.proxyEnvs["ISTIO_META_NETWORK"] = network
	}

	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	merged, templatePod, err := i.render(ctx, req, w, opts)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	merged, err = reapplyOverrides(ctx, merged, pod, templatePod, pc)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	if err := i.postProcess(merged, templatePod, req); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	return merged, nil
}

// checkSize refuses a pod with more containers than MaxContainers.
func (i *Injector) checkSize(pod *corev1.Pod) error {
	limit := i.MaxContainers
	if limit <= 0 {
		limit = DefaultMaxContainers
	}
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > limit {
		return fmt.Errorf("pod %s: %d containers, init and ephemeral containers; the injector takes at most %d", podName(pod), n, limit)
	}
	return nil
}

// render runs the selected templates and merges each into the pod; it
// returns the merged pod and the templates' own pod (what was injected).
func (i *Injector) render(ctx context.Context, req *request, w Workload, opts Options) (*corev1.Pod, *corev1.Pod, error) {
	stripped, err := stripInjected(req.pod, i.mesh.GetDefaultConfig().GetStatusPort())
	if err != nil {
		return nil, nil, err
	}
	uid, gid := proxyIDs(i.OpenShift, opts.Namespace)
	data := &TemplateData{
		TypeMeta:                 w.TypeMeta,
		DeploymentMeta:           types.NamespacedName{Name: w.Name, Namespace: w.Namespace},
		ObjectMeta:               stripped.ObjectMeta,
		Spec:                     stripped.Spec,
		ProxyConfig:              req.proxyConfig,
		MeshConfig:               i.mesh,
		Values:                   i.config.Values,
		Revision:                 i.revision,
		NativeSidecars:           i.NativeSidecars,
		ProxyImage:               i.image("proxy", req.proxyConfig, stripped.Annotations),
		ProxyInitImage:           i.image("proxy_init", req.proxyConfig, stripped.Annotations),
		ProxyUID:                 uid,
		ProxyGID:                 gid,
		InboundTrafficPolicyMode: inboundTrafficPolicyMode(i.mesh),
		CompliancePolicy:         i.CompliancePolicy,
	}
	native := i.NativeSidecars
	switch req.pod.Annotations[nativeSidecarAnnotation] {
	case "true":
		native = true
	case "false":
		native = false
	}
	merged := req.pod
	templatePod := &corev1.Pod{}
	for _, name := range i.selectTemplates(req.pod) {
		t, ok := i.config.Templates[name]
		if !ok {
			return nil, nil, fmt.Errorf("annotation %s: template %q not found; have %s",
				templatesAnnotation, name, strings.Join(slices.Sorted(maps.Keys(i.config.Templates)), ", "))
		}
		// A clone per request gets this request's list append (linear,
		// where sprig's copies the list) and output that ends with ctx.
		t, err := t.Clone()
		if err != nil {
			return nil, nil, fmt.Errorf("template %s: %w", name, err)
		}
		t.Funcs(newAppender(ctx).funcs())
		var buf bytes.Buffer
		if err := t.Execute(ctxWriter{ctx, &buf}, data); err != nil {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("template %s: %w", name, ctx.Err())
			}
			return nil, nil, fmt.Errorf("template %s: %w", name, err)
		}
		// YAML is parsed once; both merges decode the (much faster) JSON.
		// Strict: a duplicate key means a value broke out of its scalar
		// (istiod would keep the last one).
		rendered, err := yaml.YAMLToJSONStrict(buf.Bytes())
		if err != nil {
			return nil, nil, fmt.Errorf("template %s output: %w", name, err)
		}
		if templatePod, err = overlayJSON(templatePod, rendered); err != nil {
			return nil, nil, fmt.Errorf("template %s output: %w", name, err)
		}
		// A user's istio-proxy customization sits in containers; with native
		// sidecars the template puts the proxy in initContainers: move it so
		// the two merge.
		if native && findContainer(proxyContainer, templatePod.Spec.InitContainers) != nil &&
			findContainer(proxyContainer, merged.Spec.Containers) != nil {
			merged = merged.DeepCopy()
			merged.Spec.Containers, merged.Spec.InitContainers =
				moveContainer(merged.Spec.Containers, merged.Spec.InitContainers, proxyContainer)
		}
		if merged, err = overlayJSON(merged, rendered); err != nil {
			return nil, nil, fmt.Errorf("template %s merge: %w", name, err)
		}
	}
	return merged, templatePod, nil
}

// selectTemplates is the inject.istio.io/templates annotation or the
// default templates, with aliases expanded (one level).
func (i *Injector) selectTemplates(pod *corev1.Pod) []string {
	names := i.config.DefaultTemplates
	if a, ok := pod.Annotations[templatesAnnotation]; ok {
		names = nil
		for _, n := range strings.Split(a, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	var out []string
	for _, n := range names {
		if al, ok := i.config.Aliases[n]; ok {
			out = append(out, al...)
		} else {
			out = append(out, n)
		}
	}
	return out
}

// image is hub/<values.global.<component>.image>:tag with the image type
// (distroless, debug) of the proxy config, values.global.variant or the
// pod's sidecar.istio.io/proxyImageType annotation.
func (i *Injector) image(component string, pc *meshconfig.ProxyConfig, annotations map[string]string) string {
	name := i.config.stringValue("global", component, "image")
	if name == "" {
		name = "proxyv2"
	}
	imageType := i.config.stringValue("global", "variant")
	if pc.GetImage() != nil {
		imageType = pc.GetImage().GetImageType()
	}
	if t, ok := annotations[proxyImageTypeAnnotation]; ok {
		imageType = t
	}
	tag := i.config.stringValue("global", "tag")
	if imageType != "" {
		for _, known := range []string{"distroless", "debug"} {
			tag = strings.TrimSuffix(tag, "-"+known)
		}
		if imageType != "default" {
			tag += "-" + imageType
		}
	}
	return i.config.stringValue("global", "hub") + "/" + name + ":" + tag
}

func inboundTrafficPolicyMode(mesh *meshconfig.MeshConfig) string {
	if mesh.GetInboundTrafficPolicy().GetMode() == meshconfig.MeshConfig_InboundTrafficPolicy_LOCALHOST {
		return "localhost"
	}
	return "passthrough"
}

// stripInjected undoes a previous injection (named in the status
// annotation) so re-injection is idempotent, and re-adds the user's
// istio-proxy overrides saved at the first injection.
func stripInjected(pod *corev1.Pod, statusPort int32) (*corev1.Pod, error) {
	p := pod.DeepCopy()
	if st, ok := parseStatus(p.Annotations[statusAnnotation]); ok {
		p.Spec.Containers = removeNamed(p.Spec.Containers, st.Containers)
		p.Spec.InitContainers = removeNamed(p.Spec.InitContainers, st.InitContainers)
		if cur, ok := prometheusPort(p); ok && cur == fmt.Sprint(statusPort) {
			clearPrometheusAnnotations(p)
		}
		delete(p.Annotations, statusAnnotation)
	}
	raw, ok := p.Annotations[overridesAnnotation]
	if !ok {
		return p, nil
	}
	var ov overrides
	if err := json.Unmarshal([]byte(raw), &ov); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", overridesAnnotation, err)
	}
	p.Spec.Containers = appendMissing(p.Spec.Containers, ov.Containers)
	p.Spec.InitContainers = appendMissing(p.Spec.InitContainers, ov.InitContainers)
	return p, nil
}

// appendMissing appends to cs the containers of extra whose names cs
// lacks, in one pass over each.
func appendMissing(cs, extra []corev1.Container) []corev1.Container {
	if len(extra) == 0 {
		return cs
	}
	have := make(map[string]bool, len(cs))
	for _, c := range cs {
		have[c.Name] = true
	}
	for _, c := range extra {
		if !have[c.Name] {
			cs, have[c.Name] = append(cs, c), true
		}
	}
	return cs
}

// overlayJSON strategic-merges a rendered template (a Pod as JSON) over
// target.
func overlayJSON(target *corev1.Pod, overlay []byte) (*corev1.Pod, error) {
	patch := map[string]any{}
	if string(overlay) != "null" {
		if err := json.Unmarshal(overlay, &patch); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
	}
	return overlayMap(target, patch)
}

func overlayMap(target *corev1.Pod, patch map[string]any) (*corev1.Pod, error) {
	js, err := json.Marshal(target)
	if err != nil {
		return nil, err
	}
	orig := map[string]any{}
	if err := json.Unmarshal(js, &orig); err != nil {
		return nil, err
	}
	schema, err := strategicpatch.NewPatchMetaFromStruct(corev1.Pod{})
	if err != nil {
		return nil, err
	}
	out, err := strategicpatch.StrategicMergeMapPatchUsingLookupPatchMeta(orig, patch, schema)
	if err != nil {
		return nil, fmt.Errorf("strategic merge: %w", err)
	}
	js, err = json.Marshal(out)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(js, pod); err != nil {
		return nil, fmt.Errorf("merged pod: %w", err)
	}
	return pod, nil
}

func podName(pod *corev1.Pod) string {
	n := pod.Name
	if n == "" && pod.GenerateName != "" {
		n = pod.GenerateName + "*"
	}
	if pod.Namespace != "" {
		return pod.Namespace + "/" + n
	}
	return n
}
