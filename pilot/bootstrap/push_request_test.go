package bootstrap

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshpilot/meshpilot/model"
)

func TestPushRequestFor(t *testing.T) {
	we := model.ConfigKey{Kind: model.KindWorkloadEntry, Namespace: "shop", Name: "vm-1"}
	se := model.ConfigKey{Kind: model.KindServiceEntry, Namespace: "shop", Name: "vm"}
	svc := model.ConfigKey{Kind: model.KindService, Namespace: "shop", Name: "vm.example.com"}
	eps := model.ConfigKey{Kind: model.KindEndpoints, Namespace: "shop", Name: "vm.example.com"}
	for _, tc := range []struct {
		name     string
		configs  []model.ConfigKey
		changes  model.RegistryChanges
		wantNil  bool
		wantFull bool
		wantKeys []model.ConfigKey
	}{
		{name: "nothing", wantNil: true},
		{name: "a WorkloadEntry that feeds no service", configs: []model.ConfigKey{we}, wantNil: true},
		{name: "a WorkloadEntry changing endpoints: EDS only, without its key",
			configs: []model.ConfigKey{we}, changes: model.RegistryChanges{Endpoints: []model.ConfigKey{eps}},
			wantKeys: []model.ConfigKey{eps}},
		{name: "a WorkloadEntry changing a service's cluster inputs: full, with its key",
			configs: []model.ConfigKey{we}, changes: model.RegistryChanges{Services: []model.ConfigKey{svc}},
			wantFull: true, wantKeys: []model.ConfigKey{svc, we}},
		{name: "a ServiceEntry and a WorkloadEntry: full",
			configs: []model.ConfigKey{se, we}, changes: model.RegistryChanges{Endpoints: []model.ConfigKey{eps}},
			wantFull: true, wantKeys: []model.ConfigKey{eps, se, we}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := pushRequestFor(tc.configs, tc.changes)
			if tc.wantNil {
				if req != nil {
					t.Fatalf("request %+v, want none", req)
				}
				return
			}
			if req == nil {
				t.Fatal("no request")
			}
			var keys []model.ConfigKey
			for k := range req.ConfigsUpdated {
				keys = append(keys, k)
			}
			if diff := cmp.Diff(tc.wantKeys, keys, cmpSortKeys); diff != "" || req.Full != tc.wantFull {
				t.Errorf("full %v (want %v), keys (-want +got):\n%s", req.Full, tc.wantFull, diff)
			}
		})
	}
}

var cmpSortKeys = cmpopts.SortSlices(func(a, b model.ConfigKey) bool { return a.Compare(b) < 0 })
