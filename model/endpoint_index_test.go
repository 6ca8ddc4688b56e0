package model

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestByAddressFollowsUpdates: after random updates and shard deletions,
// ByAddress answers what a scan of every host's endpoints does.
func TestByAddressFollowsUpdates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := NewEndpointIndex()
	hosts := []string{"a", "b", "c", "d"}
	shards := []string{"Kubernetes", "ServiceEntry"}
	ips := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	for step := range 300 {
		if rng.IntN(20) == 0 {
			x.DeleteShard(shards[rng.IntN(len(shards))])
		} else {
			var eps []*Endpoint
			for i := range rng.IntN(4) {
				eps = append(eps, &Endpoint{Address: ips[rng.IntN(len(ips))], Port: uint32(80 + i), ServicePortName: "http"})
			}
			x.Update(shards[rng.IntN(len(shards))], hosts[rng.IntN(len(hosts))], eps)
		}
		for _, ip := range ips {
			want := map[string][]*Endpoint{}
			for _, h := range hosts {
				for _, e := range x.Endpoints(h) {
					if e.Address == ip {
						want[h] = append(want[h], e)
					}
				}
			}
			if diff := cmp.Diff(want, x.ByAddress(ip)); diff != "" {
				t.Fatalf("step %d, %s (-scan +ByAddress):\n%s", step, ip, diff)
			}
		}
		for ip, hs := range x.hostsAt {
			for h := range hs {
				if len(x.ByAddress(ip)[h]) == 0 {
					t.Fatalf("step %d: the index keeps %s at %s without an endpoint there", step, h, ip)
				}
			}
		}
	}
}
