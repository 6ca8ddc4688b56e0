package xds

import (
	"maps"
	"slices"
	"testing"

	"github.com/meshpilot/meshpilot/model"
)

func TestApplySotWNames(t *testing.T) {
	set := func(names ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, n := range names {
			m[n] = struct{}{}
		}
		return m
	}
	cases := []struct {
		name        string
		typeURL     string
		before      []string // nil: a new watch
		req         []string
		changed     bool
		added       []string
		wantNames   []string
		wantWildcrd bool
	}{
		{name: "first EDS request", typeURL: model.EndpointType, req: []string{"a", "b"}, changed: true, added: []string{"a", "b"}, wantNames: []string{"a", "b"}},
		{name: "same names", typeURL: model.EndpointType, before: []string{"a", "b"}, req: []string{"a", "b"}, wantNames: []string{"a", "b"}},
		{name: "same set, other order", typeURL: model.EndpointType, before: []string{"a", "b"}, req: []string{"b", "a"}, wantNames: []string{"a", "b"}},
		{name: "duplicates of a smaller set", typeURL: model.EndpointType, before: []string{"a", "b"}, req: []string{"a", "a"}, changed: true, wantNames: []string{"a"}},
		{name: "only adds", typeURL: model.EndpointType, before: []string{"a"}, req: []string{"a", "b", "c"}, changed: true, added: []string{"b", "c"}, wantNames: []string{"a", "b", "c"}},
		{name: "inserted in the middle", typeURL: model.EndpointType, before: []string{"a", "c"}, req: []string{"a", "b", "c", "d"}, changed: true, added: []string{"b", "d"}, wantNames: []string{"a", "b", "c", "d"}},
		{name: "reordered and added", typeURL: model.EndpointType, before: []string{"a", "b"}, req: []string{"b", "a", "c"}, changed: true, added: []string{"c"}, wantNames: []string{"a", "b", "c"}},
		{name: "a held name repeated", typeURL: model.EndpointType, before: []string{"a", "b"}, req: []string{"a", "b", "a"}, wantNames: []string{"a", "b"}},
		{name: "an added name repeated", typeURL: model.EndpointType, before: []string{"a"}, req: []string{"a", "b", "b"}, changed: true, added: []string{"b"}, wantNames: []string{"a", "b"}},
		{name: "star inserted", typeURL: model.EndpointType, before: []string{"a"}, req: []string{"*", "a"}, changed: true, wantNames: []string{"a"}, wantWildcrd: true},
		{name: "adds and removes", typeURL: model.EndpointType, before: []string{"a"}, req: []string{"b"}, changed: true, wantNames: []string{"b"}},
		{name: "only removes", typeURL: model.EndpointType, before: []string{"a", "b"}, req: []string{"a"}, changed: true, wantNames: []string{"a"}},
		{name: "RDS adds", typeURL: model.RouteType, before: []string{"80"}, req: []string{"80", "8080"}, changed: true, added: []string{"8080"}, wantNames: []string{"80", "8080"}},
		{name: "CDS by name adds: the whole set is due", typeURL: model.ClusterType, before: []string{"a"}, req: []string{"a", "b"}, changed: true, wantNames: []string{"a", "b"}},
		{name: "SDS adds: not a partial type", typeURL: model.SecretType, before: []string{"default"}, req: []string{"default", "ROOTCA"}, changed: true, wantNames: []string{"ROOTCA", "default"}},
		{name: "star on EDS", typeURL: model.EndpointType, before: []string{"a"}, req: []string{"a", "*"}, changed: true, wantNames: []string{"a"}, wantWildcrd: true},
		{name: "CDS wildcard again", typeURL: model.ClusterType, before: []string{}, req: nil, wantNames: []string{}, wantWildcrd: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWatch(tc.typeURL)
			if tc.before != nil {
				applySotWNames(ws, tc.before)
			}
			got := applySotWNames(ws, tc.req)
			if got.changed != tc.changed {
				t.Errorf("changed = %v, want %v", got.changed, tc.changed)
			}
			if added := slices.Sorted(maps.Keys(got.added)); !slices.Equal(added, tc.added) && (len(added) != 0 || len(tc.added) != 0) {
				t.Errorf("added = %v, want %v", added, tc.added)
			}
			if names := slices.Sorted(maps.Keys(ws.watched.ResourceNames)); !slices.Equal(names, tc.wantNames) && (len(names) != 0 || len(tc.wantNames) != 0) {
				t.Errorf("subscription = %v, want %v", names, tc.wantNames)
			}
			if ws.watched.Wildcard != tc.wantWildcrd {
				t.Errorf("wildcard = %v, want %v", ws.watched.Wildcard, tc.wantWildcrd)
			}
			if !maps.Equal(ws.watched.ResourceNames, set(tc.wantNames...)) {
				t.Errorf("set = %v", ws.watched.ResourceNames)
			}
		})
	}
}

// TestApplySotWNamesRepeatAllocatesNothing: an ACK repeating a 500-name
// subscription builds no set.
func TestApplySotWNamesRepeatAllocatesNothing(t *testing.T) {
	names := make([]string, 500)
	for i := range names {
		names[i] = "outbound|80||svc" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".ns.svc.cluster.local"
	}
	ws := newWatch(model.EndpointType)
	applySotWNames(ws, names)
	again := slices.Clone(names) // a decoded request has strings of its own
	allocs := testing.AllocsPerRun(10, func() {
		if applySotWNames(ws, again).changed {
			t.Fatal("a repeated subscription reported a change")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per repeated request, want 0", allocs)
	}
}

func TestEndpointsUntouched(t *testing.T) {
	hostA, hostC := "a.default.svc.cluster.local", "c.default.svc.cluster.local"
	key := func(kind model.Kind, host string) model.ConfigKey {
		return model.ConfigKey{Kind: kind, Name: host, Namespace: "default"}
	}
	newService := model.NewPushRequest(true, model.ReasonServiceUpdate, key(model.KindService, hostC), key(model.KindEndpoints, hostC), key(model.KindServiceEntry, "c"))
	cases := []struct {
		name    string
		typeURL string
		sent    bool
		req     *model.PushRequest
		want    bool
	}{
		{"unwatched new service", model.EndpointType, true, newService, true},
		{"watched service changed", model.EndpointType, true, model.NewPushRequest(true, model.ReasonServiceUpdate, key(model.KindService, hostA)), false},
		{"watched endpoints changed", model.EndpointType, true, model.NewPushRequest(false, model.ReasonEndpointUpdate, key(model.KindEndpoints, hostA)), false},
		{"not confined: a DestinationRule", model.EndpointType, true, model.NewPushRequest(true, model.ReasonConfigUpdate, key(model.KindDestinationRule, "dr")), false},
		{"not confined: no keys", model.EndpointType, true, model.NewPushRequest(true, model.ReasonServiceUpdate), false},
		{"nothing sent yet", model.EndpointType, false, newService, false},
		{"not EDS", model.ClusterType, true, newService, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWatch(tc.typeURL)
			applySotWNames(ws, []string{clusterA, "outbound|80|v1|" + hostA})
			if tc.sent {
				ws.nonceSent = "n1"
			}
			c := &Connection{proxy: &model.Proxy{}, watches: map[string]*watchState{tc.typeURL: ws}}
			if got := c.endpointsUntouched(tc.typeURL, tc.req); got != tc.want {
				t.Errorf("endpointsUntouched = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestApplySotWNamesKeepsHostIndex: names inserted in place extend the
// host index scoping uses, as a rebuild would.
func TestApplySotWNamesKeepsHostIndex(t *testing.T) {
	ws := newWatch(model.EndpointType)
	applySotWNames(ws, []string{"outbound|80||a.ns.svc.cluster.local", "outbound|80||c.ns.svc.cluster.local"})
	ws.hosts()
	got := applySotWNames(ws, []string{"outbound|80||a.ns.svc.cluster.local", "outbound|80|v1|b.ns.svc.cluster.local", "outbound|80||c.ns.svc.cluster.local"})
	if !got.changed || len(got.added) != 1 {
		t.Fatalf("change = %+v, want one added name", got)
	}
	kept := maps.Clone(ws.hosts())
	ws.hostIndex = nil
	if rebuilt := ws.hosts(); !maps.Equal(kept, rebuilt) {
		t.Fatalf("host index %v, a rebuild gives %v", kept, rebuilt)
	}
}
