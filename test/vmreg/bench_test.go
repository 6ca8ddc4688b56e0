package vmreg_test

import (
	"fmt"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
)

// BenchmarkVMConnect is the time from a VM's first request on the secure
// port to its first response: with auto-registration (a new WorkloadEntry
// created through the API server each time: read the entry, read the group,
// create) and without (the same node, no group). The difference is what
// registration adds to a VM's connect. One replica, a real kube-apiserver;
// streams stay open until the benchmark ends.
func BenchmarkVMConnect(b *testing.B) {
	installCRDs(b)
	srv, _ := startReplica(b, "meshpilot-bench")
	ns := newNamespace(b, "vmbench")
	createGroup(b, ns, "bench", "bench-vm", false)
	conn := bootstraptest.DialSecureAs(b, srv, ns, "bench-vm")
	for _, tc := range []struct {
		name, group string
	}{{"plain", ""}, {"register", "bench"}} {
		b.Run(tc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				ip := fmt.Sprintf("10.%d.%d.%d", len(tc.name), i/250%250, i%250+1)
				if _, err := connectVM(b, conn, ns, tc.group, ip); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
