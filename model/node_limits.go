package model

import (
	"errors"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// Limits on what an xDS node may carry. ParseProxy checks them first, from
// the sizes of the decoded protobuf (counts and proto.Size, no parsing), so
// a hostile node is refused before any work proportional to its content.
// Each is far above what a real Envoy, istio-agent or proxyless gRPC client
// sends (istio-agent's node is a few KiB; Istio's NodeMetadata in
// pkg/model/proxy.go lists what it may hold).
const (
	// MaxNodeIDBytes bounds node.id, "TYPE~IP~POD.NS~NS.svc.DOMAIN": a pod
	// name (at most 253 bytes), a namespace twice (63 each), an IP (45)
	// and a DNS domain (253) add up to about 700.
	MaxNodeIDBytes = 1024
	// MaxLocalityBytes bounds each of node.locality's region, zone and
	// sub_zone: Kubernetes topology label values are at most 63 bytes.
	MaxLocalityBytes = 256
	// MaxInstanceIPs bounds INSTANCE_IPS: a pod has one address per IP
	// family, a VM one per interface.
	MaxInstanceIPs = 1024
	// MaxLabels bounds LABELS (and STATIC_LABELS): Kubernetes sets no
	// count, but workloads carry tens of labels.
	MaxLabels = 1024
	// MaxMetadataEntries bounds the keys of node.metadata and the entries
	// of every other map or list in it (ANNOTATIONS, PLATFORM_METADATA,
	// REQUESTED_NETWORK_VIEW, PILOT_SAN, PROXY_CONFIG's lists, ...).
	// istio-agent sends about 40 keys plus one per ISTIO_META_* variable.
	MaxMetadataEntries = 4096
	// MaxMetadataDepth bounds the nesting of node.metadata; PROXY_CONFIG,
	// the deepest, nests about 5 levels.
	MaxMetadataDepth = 32
	// MaxMetadataBytes bounds node.metadata's encoded size: pod annotations
	// are at most 256 KiB in Kubernetes, the labels a few KiB, PROXY_CONFIG
	// a few KiB.
	MaxMetadataBytes = 1 << 20
)

// maxKeyInError bounds a client-chosen metadata key quoted in an error.
const maxKeyInError = 64

// checkNodeLimits refuses a node over the limits, naming the field. The
// specific counts come before the total size so that the error names the
// field at fault.
func checkNodeLimits(node *corev3.Node) error {
	if n := len(node.GetId()); n > MaxNodeIDBytes {
		return fmt.Errorf("node.id: %d bytes, at most %d", n, MaxNodeIDBytes)
	}
	loc := node.GetLocality()
	for _, f := range []struct{ name, value string }{
		{"region", loc.GetRegion()}, {"zone", loc.GetZone()}, {"sub_zone", loc.GetSubZone()},
	} {
		if n := len(f.value); n > MaxLocalityBytes {
			return fmt.Errorf("node.locality.%s: %d bytes, at most %d", f.name, n, MaxLocalityBytes)
		}
	}
	fields := node.GetMetadata().GetFields()
	if len(fields) == 0 {
		return nil
	}
	if n := len(fields); n > MaxMetadataEntries {
		return fmt.Errorf("node.metadata: %d keys, at most %d", n, MaxMetadataEntries)
	}
	if n := countList(fields[keyInstanceIPs]); n > MaxInstanceIPs {
		return fmt.Errorf("node.metadata.%s: %d addresses, at most %d", keyInstanceIPs, n, MaxInstanceIPs)
	}
	for _, key := range []string{keyLabels, keyStaticLabels} {
		if n := len(fields[key].GetStructValue().GetFields()); n > MaxLabels {
			return fmt.Errorf("node.metadata.%s: %d labels, at most %d", key, n, MaxLabels)
		}
	}
	total, largest, largestSize := 0, "", 0
	for k, v := range fields {
		size := len(k) + proto.Size(v)
		total += size
		if size > largestSize {
			largest, largestSize = k, size
		}
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("node.metadata: %d bytes, at most %d (largest key %s: %d bytes)",
			total, MaxMetadataBytes, clientlog.Truncate(largest, maxKeyInError), largestSize)
	}
	for k, v := range fields {
		if err := checkValue(v, 1); err != nil {
			return fmt.Errorf("node.metadata.%s%w", clientlog.Truncate(k, maxKeyInError), err)
		}
	}
	return nil
}

// countList counts the entries of a comma-separated string or a list,
// without splitting it.
func countList(v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		if k.StringValue == "" {
			return 0
		}
		return strings.Count(k.StringValue, ",") + 1
	case *structpb.Value_ListValue:
		return len(k.ListValue.GetValues())
	}
	return 0
}

// pathError is a limit error below a metadata key; its text starts with
// the rest of the path (".KEY" or "[i]") so callers prepend theirs.
type pathError struct {
	path string
	msg  string
}

func (e *pathError) Error() string { return e.path + ": " + e.msg }

// checkValue checks the nesting and the entry counts below v, at depth.
func checkValue(v *structpb.Value, depth int) error {
	var n int
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		n = len(k.StructValue.GetFields())
	case *structpb.Value_ListValue:
		n = len(k.ListValue.GetValues())
	default:
		return nil
	}
	if depth >= MaxMetadataDepth {
		return &pathError{msg: fmt.Sprintf("nested deeper than %d levels", MaxMetadataDepth)}
	}
	if n > MaxMetadataEntries {
		return &pathError{msg: fmt.Sprintf("%d entries, at most %d", n, MaxMetadataEntries)}
	}
	prefix := func(p string, err error) error {
		var pe *pathError
		if errors.As(err, &pe) {
			return &pathError{path: p + pe.path, msg: pe.msg}
		}
		return err
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		for key, child := range k.StructValue.GetFields() {
			if err := checkValue(child, depth+1); err != nil {
				return prefix("."+clientlog.Truncate(key, maxKeyInError), err)
			}
		}
	case *structpb.Value_ListValue:
		for i, child := range k.ListValue.GetValues() {
			if err := checkValue(child, depth+1); err != nil {
				return prefix(fmt.Sprintf("[%d]", i), err)
			}
		}
	}
	return nil
}
