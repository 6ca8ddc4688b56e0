package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/util/yaml"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// IsGatewayAPI reports whether apiVersion is of the Gateway API group.
func IsGatewayAPI(apiVersion string) bool {
	return apiVersion == gwv1.GroupVersion.String() || apiVersion == Group+"/v1beta1" || apiVersion == v1alpha2
}

// v1alpha2 is the version the experimental channel also serves TLSRoute,
// TCPRoute and UDPRoute in, with v1's schema.
const v1alpha2 = Group + "/v1alpha2"

// l4Kind reports whether kind is a route kind v1alpha2 serves.
func l4Kind(kind string) bool {
	return kind == KindTLSRoute || kind == KindTCPRoute || kind == KindUDPRoute
}

// Decode adds the object of one YAML or JSON document of a Gateway API
// kind (GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute,
// UDPRoute, ReferenceGrant, BackendTLSPolicy, ListenerSet; v1, or the same kinds' v1beta1 and, for
// TLSRoute, TCPRoute and UDPRoute, v1alpha2, which have the same schema)
// to in, decoding strictly:
// unknown fields are errors. Namespaced objects without a namespace get
// defaultNS.
func (in *Input) Decode(doc []byte, defaultNS string) error {
	var hdr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsyaml.Unmarshal(doc, &hdr); err != nil {
		return fmt.Errorf("gateway api: %w", err)
	}
	if !IsGatewayAPI(hdr.APIVersion) {
		return fmt.Errorf("gateway api: apiVersion %q is not %s", hdr.APIVersion, gwv1.GroupVersion)
	}
	if hdr.APIVersion == v1alpha2 && !l4Kind(hdr.Kind) {
		return fmt.Errorf("gateway api: %s is not read in %s", hdr.Kind, v1alpha2)
	}
	var err error
	switch hdr.Kind {
	case KindGatewayClass:
		err = decodeInto(doc, "", &in.GatewayClasses) // cluster-scoped
	case KindGateway:
		err = decodeInto(doc, defaultNS, &in.Gateways)
	case KindHTTPRoute:
		err = decodeInto(doc, defaultNS, &in.HTTPRoutes)
	case KindGRPCRoute:
		err = decodeInto(doc, defaultNS, &in.GRPCRoutes)
	case KindTLSRoute:
		err = decodeInto(doc, defaultNS, &in.TLSRoutes)
	case KindTCPRoute:
		err = decodeInto(doc, defaultNS, &in.TCPRoutes)
	case KindUDPRoute:
		err = decodeInto(doc, defaultNS, &in.UDPRoutes)
	case KindReferenceGrant:
		err = decodeInto(doc, defaultNS, &in.ReferenceGrants)
	case KindBackendTLSPolicy:
		err = decodeInto(doc, defaultNS, &in.BackendTLSPolicies)
	case KindListenerSet:
		err = decodeInto(doc, defaultNS, &in.ListenerSets)
	default:
		return fmt.Errorf("gateway api: kind %q is not read (GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute, ReferenceGrant, BackendTLSPolicy, ListenerSet are)", hdr.Kind)
	}
	if err != nil {
		return fmt.Errorf("gateway api: %s: %w", hdr.Kind, err)
	}
	return nil
}

// decodeInto decodes doc strictly into a new object, gives it defaultNS
// when it has no namespace, and appends it to list.
func decodeInto[T any, PT interface {
	*T
	GetNamespace() string
	SetNamespace(string)
}](doc []byte, defaultNS string, list *[]PT) error {
	o := PT(new(T))
	err := sigsyaml.UnmarshalStrict(doc, o)
	if o.GetNamespace() == "" {
		o.SetNamespace(defaultNS)
	}
	*list = append(*list, o)
	return err
}

// DecodeAll adds every document of a multi-document YAML stream to in,
// skipping empty documents and those of other API groups.
func (in *Input) DecodeAll(data []byte, defaultNS string) error {
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("gateway api: %w", err)
		}
		var hdr struct {
			APIVersion string `json:"apiVersion"`
		}
		if err := sigsyaml.Unmarshal(doc, &hdr); err != nil {
			return fmt.Errorf("gateway api: %w", err)
		}
		if !IsGatewayAPI(hdr.APIVersion) {
			continue
		}
		if err := in.Decode(doc, defaultNS); err != nil {
			return err
		}
	}
}
