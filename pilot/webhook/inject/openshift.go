package inject

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// OpenShift preallocates a UID range and supplemental groups to each
// namespace; pods there must run inside them.
const (
	uidRangeAnnotation           = "openshift.io/sa.scc.uid-range"
	supplementalGroupsAnnotation = "openshift.io/sa.scc.supplemental-groups"
	defaultProxyID               = 1337
)

// proxyIDs is the proxy's UID and GID: 1337, or on OpenShift (openShift
// true and the namespace known) the top of the namespace's UID range and
// of its first supplemental-group block, as Istio picks them.
func proxyIDs(openShift bool, ns *corev1.Namespace) (uid, gid int64) {
	uid, gid = defaultProxyID, defaultProxyID
	if !openShift || ns == nil {
		return uid, gid
	}
	if _, end, err := parseIDBlock(ns.Annotations[uidRangeAnnotation]); err == nil {
		uid = end
	}
	groups, ok := ns.Annotations[supplementalGroupsAnnotation]
	if !ok {
		groups = ns.Annotations[uidRangeAnnotation]
	}
	if first, _, _ := strings.Cut(groups, ","); first != "" {
		if _, end, err := parseIDBlock(first); err == nil {
			gid = end
		}
	}
	return uid, gid
}

// parseIDBlock reads "start/size" or "start-end" into the first and last ID.
func parseIDBlock(s string) (start, end int64, err error) {
	if a, b, ok := strings.Cut(s, "/"); ok {
		first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
		size, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
		if err1 != nil || err2 != nil || size == 0 {
			return 0, 0, fmt.Errorf("ID block %q is not start/size", s)
		}
		return int64(first), int64(first + size - 1), nil
	}
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("ID block %q is not start-end", s)
	}
	return int64(first), int64(last), nil
}
