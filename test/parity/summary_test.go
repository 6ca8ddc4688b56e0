package parity

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Resource types as the fixture directories name them.
const (
	listenerType = "envoy.config.listener.v3.Listener"
	clusterType  = "envoy.config.cluster.v3.Cluster"
	routeType    = "envoy.config.route.v3.RouteConfiguration"
	endpointType = "envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// shortTypes are the names diffs and the exceptions file use for the types.
var shortTypes = map[string]string{
	listenerType: "listener",
	clusterType:  "cluster",
	routeType:    "route",
	endpointType: "endpoint",
}

// item is one element of an ordered list aspect: a name (what an
// exception's ignore list matches) and what else is compared about it.
type item struct {
	Name   string
	Detail string
}

func (i item) String() string {
	if i.Detail == "" {
		return i.Name
	}
	return i.Name + " " + i.Detail
}

// aspect is one compared property of a resource. Where narrows it inside
// the resource (a filter chain, a virtual host); Items is its value.
type aspect struct {
	Name  string
	Where string
	Items []item
}

func (a aspect) key() string { return a.Where + "\x00" + a.Name }

// summary is the structure of one resource: the aspects the test compares.
type summary []aspect

// summarize reduces one resource (protojson decoded into generic JSON) of
// typ to its compared aspects.
func summarize(typ string, r map[string]any) summary {
	switch typ {
	case listenerType:
		return summarizeListener(r)
	case clusterType:
		return summarizeCluster(r)
	case routeType:
		return summarizeRoute(r)
	case endpointType:
		return summarizeEndpoints(r)
	}
	return nil
}

func summarizeListener(l map[string]any) summary {
	out := summary{{Name: "listener filters", Items: filterItems(list(l["listenerFilters"]))}}
	var chains []item
	addChain := func(prefix string, fc map[string]any) {
		where := prefix + chainKey(fc)
		name, match := chainParts(fc)
		chains = append(chains, item{Name: prefix + name, Detail: match})
		var network, http []item
		for _, f := range list(fc["filters"]) {
			fm := obj(f)
			network = append(network, filterItem(fm))
			tc := obj(fm["typedConfig"])
			if str(tc["@type"]) == hcmType {
				http = append(http, filterItems(list(tc["httpFilters"]))...)
			}
		}
		out = append(out, aspect{Name: "network filters", Where: where, Items: network})
		if len(http) > 0 {
			out = append(out, aspect{Name: "http filters", Where: where, Items: http})
		}
	}
	for _, fc := range list(l["filterChains"]) {
		addChain("", obj(fc))
	}
	if d := obj(l["defaultFilterChain"]); d != nil {
		addChain("default ", d)
	}
	// Envoy picks a chain by its match, not by its position: compared as a set.
	sortItems(chains)
	out = append(out, aspect{Name: "filter chains", Items: chains})
	return out
}

func sortItems(items []item) {
	sort.Slice(items, func(i, j int) bool { return items[i].String() < items[j].String() })
}

const hcmType = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"

// chainKey names a filter chain by its name and its match.
func chainKey(fc map[string]any) string {
	name, match := chainParts(fc)
	if match == "" {
		return name
	}
	return name + " " + match
}

// chainParts returns a filter chain's name ("(unnamed)" when empty) and
// its match as JSON ("" when absent).
func chainParts(fc map[string]any) (name, match string) {
	name = str(fc["name"])
	if name == "" {
		name = "(unnamed)"
	}
	if m := fc["filterChainMatch"]; m != nil {
		match = compact(m)
	}
	return name, match
}

func filterItems(fs []any) []item {
	out := make([]item, 0, len(fs))
	for _, f := range fs {
		out = append(out, filterItem(obj(f)))
	}
	return out
}

// filterItem is a filter's name with its typed config's @type (and, for a
// TypedStruct, the type it carries).
func filterItem(f map[string]any) item {
	tc := obj(f["typedConfig"])
	t := shortURL(str(tc["@type"]))
	if u := str(tc["typeUrl"]); u != "" {
		t += " → " + shortURL(u)
	}
	if t == "" {
		return item{Name: str(f["name"])}
	}
	return item{Name: str(f["name"]), Detail: "(" + t + ")"}
}

func shortURL(u string) string { return strings.TrimPrefix(u, "type.googleapis.com/") }

func summarizeCluster(c map[string]any) summary {
	// cluster_discovery_type: type (protojson omits STATIC, the zero
	// value) or a custom cluster_type.
	typ := str(c["type"])
	if cdt := obj(c["clusterType"]); cdt != nil {
		typ = "cluster_type " + str(cdt["name"])
	} else if typ == "" {
		typ = "STATIC"
	}
	var matches []item
	for _, m := range list(c["transportSocketMatches"]) {
		mm := obj(m)
		matches = append(matches, item{Name: str(mm["name"]), Detail: compact(orEmpty(mm["match"])) + " → " + str(obj(mm["transportSocket"])["name"])})
	}
	out := summary{
		{Name: "discovery type", Items: []item{{Name: typ}}},
		{Name: "transport socket matches", Items: matches},
	}
	if ts := obj(c["transportSocket"]); ts != nil {
		out = append(out, aspect{Name: "transport socket", Items: []item{{Name: str(ts["name"])}}})
	} else {
		out = append(out, aspect{Name: "transport socket"})
	}
	return out
}

func summarizeRoute(r map[string]any) summary {
	var hosts []item
	var out summary
	for _, vh := range list(r["virtualHosts"]) {
		v := obj(vh)
		name := str(v["name"])
		hosts = append(hosts, item{Name: name})
		var domains, matches []item
		for _, d := range list(v["domains"]) {
			domains = append(domains, item{Name: str(d)})
		}
		// Envoy looks a domain up, whatever its position: compared as a set.
		sortItems(domains)
		for _, rt := range list(v["routes"]) {
			matches = append(matches, item{Name: compact(orEmpty(obj(rt)["match"]))})
		}
		out = append(out,
			aspect{Name: "domains", Where: "virtual host " + name, Items: domains},
			aspect{Name: "route matches", Where: "virtual host " + name, Items: matches})
	}
	return append(out, aspect{Name: "virtual hosts", Items: hosts})
}

// summarizeEndpoints compares the endpoints' addresses, sorted.
func summarizeEndpoints(cla map[string]any) summary {
	var addrs []item
	for _, le := range list(cla["endpoints"]) {
		for _, e := range list(obj(le)["lbEndpoints"]) {
			sa := obj(obj(obj(obj(e)["endpoint"])["address"])["socketAddress"])
			addrs = append(addrs, item{Name: fmt.Sprintf("%s:%v", str(sa["address"]), sa["portValue"])})
		}
	}
	sortItems(addrs)
	return summary{{Name: "endpoints", Items: addrs}}
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func orEmpty(v any) any {
	if v == nil {
		return map[string]any{}
	}
	return v
}

// compact is v as one line of JSON with sorted keys.
func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}
