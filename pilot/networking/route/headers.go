package route

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	networking "istio.io/api/networking/v1alpha3"
)

// headerSet is an Istio Headers translated to Envoy's lists.
type headerSet struct {
	reqAdd, respAdd       []*corev3.HeaderValueOption
	reqRemove, respRemove []string
	// host is request.set[host or :authority]: a host rewrite, since Envoy
	// refuses to edit the authority as a header.
	host string
}

// headerOps translates set (overwrite or add) and add (append or add) in
// key order, then remove. Pseudo-headers other than the authority are
// skipped (UnsupportedFields reports them).
func headerOps(h *networking.Headers) (headerSet, error) {
	var out headerSet
	var err error
	if out.reqAdd, out.host, err = headerValues(h.GetRequest(), true); err != nil {
		return headerSet{}, fmt.Errorf("request: %w", err)
	}
	if out.respAdd, _, err = headerValues(h.GetResponse(), false); err != nil {
		return headerSet{}, fmt.Errorf("response: %w", err)
	}
	out.reqRemove = removable(h.GetRequest().GetRemove())
	out.respRemove = removable(h.GetResponse().GetRemove())
	return out, nil
}

func headerValues(ops *networking.Headers_HeaderOperations, request bool) ([]*corev3.HeaderValueOption, string, error) {
	var out []*corev3.HeaderValueOption
	host := ""
	add := func(kind, k, v string, action corev3.HeaderValueOption_HeaderAppendAction) error {
		if k == "" {
			return fmt.Errorf("%s: empty header name", kind)
		}
		lk := strings.ToLower(k)
		if request && kind == "set" && (lk == "host" || lk == ":authority") {
			host = v
			return nil
		}
		if strings.HasPrefix(k, ":") || lk == "host" {
			return nil
		}
		out = append(out, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: action})
		return nil
	}
	for _, k := range sortedKeys(ops.GetSet()) {
		if err := add("set", k, ops.GetSet()[k], corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD); err != nil {
			return nil, "", err
		}
	}
	for _, k := range sortedKeys(ops.GetAdd()) {
		if err := add("add", k, ops.GetAdd()[k], corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD); err != nil {
			return nil, "", err
		}
	}
	return out, host, nil
}

func removable(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "" && !strings.HasPrefix(n, ":") && !strings.EqualFold(n, "host") {
			out = append(out, n)
		}
	}
	return out
}

// merge appends b's operations after a's (route level, then destination);
// b's host rewrite wins.
func (a headerSet) merge(b headerSet) headerSet {
	out := headerSet{
		reqAdd:     append(append([]*corev3.HeaderValueOption(nil), a.reqAdd...), b.reqAdd...),
		respAdd:    append(append([]*corev3.HeaderValueOption(nil), a.respAdd...), b.respAdd...),
		reqRemove:  append(append([]string(nil), a.reqRemove...), b.reqRemove...),
		respRemove: append(append([]string(nil), a.respRemove...), b.respRemove...),
		host:       a.host,
	}
	if b.host != "" {
		out.host = b.host
	}
	return out
}
