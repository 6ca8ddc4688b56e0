package xds

import (
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshpilot/meshpilot/model"
)

// BenchmarkStatusTracking measures what config status tracking costs per
// push at 1,000 SotW proxies (CDS, EDS, LDS, RDS; the real generators over
// Scale(100)): one op changes a VirtualService every proxy sees, pushes it
// to every proxy the round reaches, and answers every response with an ACK
// through the server's ACK path; with tracking, the status goroutine's work
// for the round (per-object reach, then settling the ACKs) runs inline and
// is reported apart as status-ns/op. "off" is PILOT_ENABLE_CONFIG_STATUS=false.
func BenchmarkStatusTracking(b *testing.B) {
	proxies := scaled(1000, 20)
	for _, mode := range []string{"off", "on"} {
		b.Run("tracking="+mode, func(b *testing.B) {
			store := &mutableStore{}
			s, _, ps := benchMeshWith(b, 100, proxies, false, true, func(env *model.Environment, o *Options) {
				for _, k := range []model.Kind{model.KindVirtualService, model.KindDestinationRule} {
					for _, c := range env.ConfigStore.List(k) {
						store.put(c)
					}
				}
				env.ConfigStore = store
				o.DisableConfigStatus = mode == "off"
			})
			byConn := map[*Connection]*benchProxy{}
			for _, p := range ps {
				byConn[p.c] = p
				for _, r := range []*discovery.DiscoveryRequest{{TypeUrl: model.ListenerType}, {TypeUrl: model.RouteType, ResourceNames: []string{"8080"}}} {
					if err := p.c.handleSotW(p.sotw, r); err != nil {
						b.Fatal(err)
					}
				}
				ackAll(p.c)
			}
			vs := store.List(model.KindVirtualService)[0]
			spec := vs.Spec.(*networking.VirtualService)
			var statusTime time.Duration
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				next := vs
				next.Generation = int64(i)
				ns := &networking.VirtualService{Hosts: spec.Hosts, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{
					{Destination: spec.Http[0].Route[0].Destination, Weight: int32(90 - i%2*10)},
					{Destination: spec.Http[0].Route[1].Destination, Weight: int32(10 + i%2*10)},
				}}}}
				next.Spec = ns
				store.put(next)
				seq := s.PushSeq() + 1
				for _, p := range ps {
					p.c.roundSeq = seq // what takePending sets on a real stream
				}
				if n := pushAll(b, s, byConn, model.NewPushRequest(true, model.ReasonConfigUpdate, vs.Key())); n != proxies {
					b.Fatalf("push reached %d proxies, want %d", n, proxies)
				}
				s.pushSeq.Store(seq)
				for _, p := range ps {
					ackAll(p.c)
				}
				if s.status != nil {
					start := time.Now()
					drainStatus(s)
					statusTime += time.Since(start)
				}
			}
			if s.status != nil {
				st, ok := s.status.Status(vs.Key())
				if !ok || st.Applied != proxies {
					b.Fatalf("status %+v: want %d applied", st, proxies)
				}
				b.ReportMetric(float64(statusTime.Nanoseconds())/float64(b.N), "status-ns/op")
			}
		})
	}
}

// ackAll answers c's last response of every type with an ACK, as a client would.
func ackAll(c *Connection) {
	c.mu.Lock()
	type answer struct {
		ws             *watchState
		nonce, version string
	}
	var as []answer
	for _, ws := range c.watches {
		if ws.nonceSent != "" && ws.ackedNonce != ws.nonceSent {
			as = append(as, answer{ws, ws.nonceSent, ws.versionSent})
		}
	}
	c.mu.Unlock()
	for _, a := range as {
		c.recordACK(a.ws, a.nonce, a.version)
	}
}

// drainStatus does the status goroutine's pending work inline.
func drainStatus(s *DiscoveryServer) {
	s.statusQ.mu.Lock()
	rounds := s.statusQ.rounds
	s.statusQ.rounds = nil
	s.statusQ.mu.Unlock()
	for _, r := range rounds {
		s.status.Round(r.seq, r.req.Start, s.roundChanges(r))
	}
	s.status.Settle()
}
