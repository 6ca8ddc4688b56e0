package model

import (
	"cmp"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
)

// Kind names a configuration kind.
type Kind string

// Kinds of configuration the control plane consumes.
const (
	KindServiceEntry    Kind = "ServiceEntry"
	KindWorkloadEntry   Kind = "WorkloadEntry"
	KindVirtualService  Kind = "VirtualService"
	KindDestinationRule Kind = "DestinationRule"
	KindGateway         Kind = "Gateway"
	KindSidecar         Kind = "Sidecar"
	// KindService marks Kubernetes Services in ConfigKeys (push scoping).
	KindService Kind = "Service"
	// KindEndpoints marks endpoint-only changes of a service (the EDS fast path).
	KindEndpoints Kind = "Endpoints"
	// KindSecret is a Kubernetes Secret a gateway's credentialName names.
	KindSecret Kind = "Secret"
	// KindConfigMap is a ConfigMap whose ca.crt a credentialName
	// "configmap://NAMESPACE/NAME" names (a BackendTLSPolicy's CA).
	KindConfigMap Kind = "ConfigMap"
	// KindMeshConfig marks a change of mesh-wide settings.
	KindMeshConfig Kind = "MeshConfig"
)

// IstioKinds lists the networking.istio.io kinds, in the order they are processed.
var IstioKinds = []Kind{KindServiceEntry, KindWorkloadEntry, KindVirtualService, KindDestinationRule, KindGateway, KindSidecar}

// Meta is the metadata of a configuration object.
type Meta struct {
	Kind            Kind
	Name            string
	Namespace       string
	Labels          map[string]string
	Annotations     map[string]string
	ResourceVersion string
	// Generation increments with each spec change (files: content hash order).
	Generation        int64
	CreationTimestamp time.Time
	// Source says where the object came from ("file.yaml#2"), for messages.
	Source string
	// GatewayAPI marks an Istio Gateway the Gateway API translator
	// generated (pilot/config/gateway). No config source sets it: a
	// hand-written object can never claim it, so it may carry rights a
	// hand-written one has not (its kubernetes-gateway:// credentials,
	// verified by the translator against ReferenceGrants).
	GatewayAPI bool
}

// Config is one configuration object: metadata and an istio.io/api spec.
// A Config handed to the model is immutable.
type Config struct {
	Meta
	Spec proto.Message
	// Status is the part of the object's status the model reads: for a
	// WorkloadEntry from Kubernetes, an IstioStatus holding its Healthy
	// condition alone (auto-registration writes it); nil otherwise, so
	// that status writes of other conditions change nothing here.
	Status proto.Message
}

// Key returns the ConfigKey of the object.
func (c *Config) Key() ConfigKey {
	return ConfigKey{Kind: c.Kind, Name: c.Name, Namespace: c.Namespace}
}

// ConfigKey identifies a configuration object or, with KindService and
// KindEndpoints, a service by hostname (Name) and namespace.
type ConfigKey struct {
	Kind      Kind
	Name      string
	Namespace string
}

// Compare orders keys by kind, namespace, then name.
func (k ConfigKey) Compare(o ConfigKey) int {
	return cmp.Or(cmp.Compare(k.Kind, o.Kind), cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

func (k ConfigKey) String() string {
	return fmt.Sprintf("%s/%s/%s", k.Kind, k.Namespace, k.Name)
}

// ConfigStore reads configuration objects.
type ConfigStore interface {
	// List returns every object of kind, sorted by namespace then name.
	// Results must not be changed.
	List(kind Kind) []Config
}
