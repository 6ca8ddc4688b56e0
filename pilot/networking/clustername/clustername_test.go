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

func TestSNIDNAT(t *testing.T) {
	cases := []struct {
		subset string
		want   string
	}{
		{"", "outbound_.9080_._.reviews.default.svc.cluster.local"},
		{"v1", "outbound_.9080_.v1_.reviews.default.svc.cluster.local"},
	}
	for _, c := range cases {
		got := SNIDNAT(c.subset, reviewsHost, 9080)
		if got != c.want {
			t.Errorf("SNIDNAT(%q) = %q, want %q", c.subset, got, c.want)
		}
		if !IsSNIDNAT(got) {
			t.Errorf("IsSNIDNAT(%q) false", got)
		}
		dir, subset, host, port, ok := Parse(got)
		if !ok || dir != Outbound || subset != c.subset || host != reviewsHost || port != 9080 {
			t.Errorf("Parse(%q) = %q %q %q %d %v", got, dir, subset, host, port, ok)
		}
	}
	for _, bad := range []string{"outbound_.", "outbound_.x_._.h", "outbound_.0_._.h", "outbound_.80_._.", "outbound_.80_.h", "outbound_.80__.h"} {
		if _, _, _, _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) ok, want not ok", bad)
		}
	}
	if IsSNIDNAT("outbound|9080||" + reviewsHost) {
		t.Error("IsSNIDNAT of a | name")
	}
}
