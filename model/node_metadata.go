package model

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// Node metadata keys, as istio-agent sends them.
const (
	keyNamespace        = "NAMESPACE"
	keyLabels           = "LABELS"
	keyStaticLabels     = "STATIC_LABELS"
	keyInstanceIPs      = "INSTANCE_IPS"
	keyServiceAccount   = "SERVICE_ACCOUNT"
	keyClusterID        = "CLUSTER_ID"
	keyNetwork          = "NETWORK"
	keyIstioVersion     = "ISTIO_VERSION"
	keyInterceptionMode = "INTERCEPTION_MODE"
	keyWorkloadName     = "WORKLOAD_NAME"
	keyGenerator        = "GENERATOR"
	keyMeshID           = "MESH_ID"
	keyPodPorts         = "POD_PORTS"
	keyDNSCapture       = "DNS_CAPTURE"
	keyDNSAutoAllocate  = "DNS_AUTO_ALLOCATE"
	keyAutoRegister     = "AUTO_REGISTER_GROUP"
	keyWorkloadEntry    = "WORKLOAD_ENTRY"
)

// decodeMetadata fills m from the node's metadata, reading only the keys
// it knows (others are ignored, as Istio ignores them). It runs after
// checkNodeLimits, so its work is bounded by the limits.
func decodeMetadata(fields map[string]*structpb.Value, m *NodeMetadata) error {
	strs := []struct {
		key string
		dst *string
	}{
		{keyNamespace, &m.Namespace}, {keyServiceAccount, &m.ServiceAccount}, {keyClusterID, &m.ClusterID},
		{keyNetwork, &m.Network},
		{keyIstioVersion, &m.IstioVersion}, {keyInterceptionMode, &m.InterceptionMode},
		{keyWorkloadName, &m.WorkloadName}, {keyGenerator, &m.Generator}, {keyMeshID, &m.MeshID},
		{keyPodPorts, &m.PodPorts}, {keyAutoRegister, &m.AutoRegisterGroup},
		{keyWorkloadEntry, &m.WorkloadEntry},
	}
	for _, f := range strs {
		s, err := stringValue(fields[f.key])
		if err != nil {
			return fmt.Errorf("node.metadata.%s: %w", f.key, err)
		}
		*f.dst = s
	}
	for _, f := range []struct {
		key string
		dst *bool
	}{{keyDNSCapture, &m.DNSCapture}, {keyDNSAutoAllocate, &m.DNSAutoAllocate}} {
		b, err := boolValue(fields[f.key])
		if err != nil {
			return fmt.Errorf("node.metadata.%s: %w", f.key, err)
		}
		*f.dst = b
	}
	labels, err := labelsValue(fields[keyLabels])
	if err != nil {
		return err
	}
	m.Labels = labels
	ips, err := listValue(keyInstanceIPs, fields[keyInstanceIPs])
	if err != nil {
		return err
	}
	m.InstanceIPs = ips
	return nil
}

// stringValue returns a string value; absent or null is "".
func stringValue(v *structpb.Value) (string, error) {
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return "", nil
	case *structpb.Value_StringValue:
		return k.StringValue, nil
	}
	return "", fmt.Errorf("want a string, got %s", kindName(v))
}

// boolValue decodes one of Istio's string booleans ("true", as the agent
// sends ISTIO_META_ values) or a JSON bool; absent or null is false.
func boolValue(v *structpb.Value) (bool, error) {
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return false, nil
	case *structpb.Value_BoolValue:
		return k.BoolValue, nil
	case *structpb.Value_StringValue:
		if k.StringValue == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(k.StringValue)
		if err != nil {
			return false, fmt.Errorf("want a boolean, got %q", clientlog.Truncate(k.StringValue, clientlog.MaxValue))
		}
		return b, nil
	}
	return false, fmt.Errorf("want a boolean, got %s", kindName(v))
}

// labelsValue decodes LABELS, an object of strings.
func labelsValue(v *structpb.Value) (map[string]string, error) {
	switch v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return nil, nil
	case *structpb.Value_StructValue:
	default:
		return nil, fmt.Errorf("node.metadata.%s: want an object of strings, got %s", keyLabels, kindName(v))
	}
	fields := v.GetStructValue().GetFields()
	out := make(map[string]string, len(fields))
	for k, lv := range fields {
		s, ok := lv.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, fmt.Errorf("node.metadata.%s.%s: want a string, got %s", keyLabels, clientlog.Truncate(k, maxKeyInError), kindName(lv))
		}
		out[k] = s.StringValue
	}
	return out, nil
}

// listValue decodes Istio's comma-separated lists ("10.0.0.1,fd00::1"),
// or a list of strings, of metadata key.
func listValue(key string, v *structpb.Value) (StringList, error) {
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return nil, nil
	case *structpb.Value_StringValue:
		var out StringList
		for p := range strings.SplitSeq(k.StringValue, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out, nil
	case *structpb.Value_ListValue:
		values := k.ListValue.GetValues()
		out := make(StringList, 0, len(values))
		for i, e := range values {
			s, ok := e.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, fmt.Errorf("node.metadata.%s[%d]: want a string, got %s", key, i, kindName(e))
			}
			out = append(out, s.StringValue)
		}
		return out, nil
	}
	return nil, fmt.Errorf("node.metadata.%s: want a comma-separated string or a list of strings, got %s", key, kindName(v))
}

func kindName(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_BoolValue:
		return "a bool"
	case *structpb.Value_StructValue:
		return "an object"
	case *structpb.Value_ListValue:
		return "a list"
	case *structpb.Value_StringValue:
		return "a string"
	}
	return "null"
}
