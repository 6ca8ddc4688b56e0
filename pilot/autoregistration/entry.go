package autoregistration

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/serviceregistry/serviceentry"
)

// Annotations istiod writes on the WorkloadEntries it registers (Istio's
// names, so that istiod and meshpilot replicas share entries during a
// migration).
const (
	// AnnotationGroup names the WorkloadGroup an entry was made from; only
	// entries with it are deleted when their proxy is gone.
	AnnotationGroup = "istio.io/autoRegistrationGroup"
	// AnnotationController names the control plane replica the proxy is
	// (or was last) connected to.
	AnnotationController = "istio.io/workloadController"
	// AnnotationConnectedAt is when the proxy connected (RFC 3339, ns).
	AnnotationConnectedAt = "istio.io/connectedAt"
	// AnnotationDisconnectedAt is when it disconnected; the entry is
	// deleted a grace period later unless it reconnects.
	AnnotationDisconnectedAt = "istio.io/disconnectedAt"
)

// timeFormat is the annotations' time format, as istiod's.
const timeFormat = time.RFC3339Nano

// maxNameLength is the longest Kubernetes object name.
const maxNameLength = 253

// EntryName is the WorkloadEntry name of a proxy of group at ip on network
// (empty: none), as istiod names it: GROUP-IP[-NETWORK], IPv6 colons
// replaced by dashes, cut from the front to 253 characters.
func EntryName(group, ip, network string) string {
	parts := []string{group, strings.ReplaceAll(ip, ":", "-")}
	if network != "" {
		parts = append(parts, network)
	}
	name := strings.Join(parts, "-")
	if len(name) > maxNameLength {
		name = name[len(name)-maxNameLength:]
	}
	return name
}

// entryFromGroup builds the WorkloadEntry proxy registers as from group's
// template: the proxy's address, network and locality; labels of the
// template, then the group's metadata, then the proxy's (later wins);
// the group's metadata annotations; owned by the group. A group with a
// probe marks the entry health-checked: it serves only once the proxy
// reports healthy (istiod does so when the proxy's ProxyConfig carries
// the readinessProbe that istioctl copies from the same group).
func entryFromGroup(name string, proxy *model.Proxy, group *networkingv1.WorkloadGroup) *networkingv1.WorkloadEntry {
	controller := true
	entry := &networkingv1.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: group.Namespace,
		Annotations: map[string]string{AnnotationGroup: group.Name},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "networking.istio.io/v1", Kind: "WorkloadGroup",
			Name: group.Name, UID: group.UID, Controller: &controller,
		}},
	}}
	spec := &entry.Spec
	if t := group.Spec.GetTemplate(); t != nil {
		proto.Merge(spec, t)
	}
	spec.Address = proxy.IPAddresses[0]
	labels := maps.Clone(spec.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, group.Spec.GetMetadata().GetLabels())
	maps.Copy(labels, proxy.Metadata.Labels)
	spec.Labels = labels
	entry.Labels = maps.Clone(labels)
	if proxy.Metadata.Network != "" {
		spec.Network = proxy.Metadata.Network
	}
	if l := localityString(proxy); l != "" {
		spec.Locality = l
	}
	maps.Copy(entry.Annotations, group.Spec.GetMetadata().GetAnnotations())
	entry.Annotations[AnnotationGroup] = group.Name
	if group.Spec.GetProbe() != nil {
		entry.Annotations[serviceentry.HealthCheckAnnotation] = "true"
	}
	return entry
}

// localityString is the proxy's locality as "region/zone/subzone".
func localityString(p *model.Proxy) string {
	l := p.Locality
	if l == nil || l.GetRegion() == "" {
		return ""
	}
	out := l.GetRegion()
	if l.GetZone() != "" {
		out += "/" + l.GetZone()
		if l.GetSubZone() != "" {
			out += "/" + l.GetSubZone()
		}
	}
	return out
}

// errIdentity is wrapped by the refusals of canControl.
var errIdentity = errors.New("identity may not register this WorkloadEntry")

// canControl checks that proxy's authenticated identity may register or
// update entry: one is required (the secure port's), of the entry's
// namespace and, when the entry names one, of its service account.
func canControl(proxy *model.Proxy, entry *networkingv1.WorkloadEntry) error {
	id := proxy.VerifiedIdentity
	if id == nil {
		return fmt.Errorf("%w: auto-registration needs an authenticated proxy (connect to the secure port, 15012)", errIdentity)
	}
	if id.Namespace != entry.Namespace {
		return fmt.Errorf("%w: %s is not of namespace %q", errIdentity, id.SPIFFE, entry.Namespace)
	}
	if sa := entry.Spec.GetServiceAccount(); sa != "" && id.ServiceAccount != sa {
		return fmt.Errorf("%w: %s is not service account %q of WorkloadEntry %s/%s", errIdentity, id.SPIFFE, sa, entry.Namespace, entry.Name)
	}
	return nil
}

// setConnected marks entry connected to controller at t.
func setConnected(entry *networkingv1.WorkloadEntry, controller string, t time.Time) {
	if entry.Annotations == nil {
		entry.Annotations = map[string]string{}
	}
	entry.Annotations[AnnotationController] = controller
	entry.Annotations[AnnotationConnectedAt] = t.Format(timeFormat)
	delete(entry.Annotations, AnnotationDisconnectedAt)
}

// annotationTime parses a time annotation; ok is false when absent or bad.
func annotationTime(annotations map[string]string, key string) (time.Time, bool) {
	t, err := time.Parse(timeFormat, annotations[key])
	return t, err == nil
}

// cleanupPolicy decides which auto-registered entries are deleted.
type cleanupPolicy struct {
	// grace is how long a disconnected entry is kept for its proxy to reconnect.
	grace time.Duration
	// staleConnected is the age of connectedAt past which a still
	// connected-looking entry is deleted (its controller died without
	// writing disconnectedAt: with a max connection age the proxy would have
	// reconnected, refreshing it); zero never.
	staleConnected time.Duration
}

// shouldDelete reports whether auto-registered entry annotations, seen at
// now, are to be deleted, as istiod's periodic cleanup decides.
func (p cleanupPolicy) shouldDelete(annotations map[string]string, now time.Time) bool {
	return annotations[AnnotationGroup] != "" && p.expired(annotations, now)
}

// shouldClearHealth reports whether the Healthy condition of an entry that
// was not auto-registered, but whose health a replica followed, is to be
// removed: its proxy is gone, so its health is no longer known (istiod's
// health-checked entry cleanup).
func (p cleanupPolicy) shouldClearHealth(annotations map[string]string, now time.Time) bool {
	return annotations[AnnotationGroup] == "" && annotations[serviceentry.HealthCheckAnnotation] == "true" &&
		annotations[AnnotationController] != "" && p.expired(annotations, now)
}

// expired reports whether annotations say the entry's proxy is gone: it
// disconnected a grace period ago, or looks connected for too long.
func (p cleanupPolicy) expired(annotations map[string]string, now time.Time) bool {
	if connected, ok := annotationTime(annotations, AnnotationConnectedAt); ok {
		return p.staleConnected > 0 && now.Sub(connected) > p.staleConnected
	}
	if annotations[AnnotationConnectedAt] != "" {
		return false // unreadable: leave it to whoever wrote it
	}
	disconnected, ok := annotationTime(annotations, AnnotationDisconnectedAt)
	if !ok {
		return annotations[AnnotationDisconnectedAt] != "" // written, unreadable: istiod deletes too
	}
	return now.Sub(disconnected) >= p.grace
}
