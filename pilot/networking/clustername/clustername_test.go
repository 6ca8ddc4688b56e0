package clustername

import "testing"

const reviewsHost = "reviews.default.svc.cluster.local"

func TestBuildAndParse(t *testing.T) {
	cases := []struct {
		dir, subset, host string
		port              uint32
		want              string
	}{
		{Outbound, "", reviewsHost, 9080, "outbound|9080||reviews.default.svc.cluster.local"},
		{Outbound, "v1", reviewsHost, 9080, "outbound|9080|v1|reviews.default.svc.cluster.local"},
		{Inbound, "", "", 9081, "inbound|9081||"},
	}
	for _, c := range cases {
		got := Build(c.dir, c.subset, c.host, c.port)
		if got != c.want {
			t.Errorf("Build = %q, want %q", got, c.want)
		}
		dir, subset, host, port, ok := Parse(got)
		if !ok || dir != c.dir || subset != c.subset || host != c.host || port != c.port {
			t.Errorf("Parse(%q) = %q %q %q %d %v", got, dir, subset, host, port, ok)
		}
	}
	for _, bad := range []string{"BlackHoleCluster", "outbound|x||h", "sideways|80||h", "outbound|80|h", "outbound|0||h"} {
		if _, _, _, _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) ok, want not ok", bad)
		}
	}
}
