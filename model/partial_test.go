package model

import "testing"

func TestResourceHost(t *testing.T) {
	const h = "reviews.default.svc.cluster.local"
	cases := map[string]string{
		"outbound|9080|v1|" + h:    h,
		"outbound|9080||" + h:      h,
		"outbound_.9080_._." + h:   h,
		"outbound_.9080_.v1_." + h: h,
		"inbound|9080||":           "",
		"BlackHoleCluster":         "",
		"outbound_.9080":           "",
		"outbound_.9080_.v1":       "",
		"outbound_9080_._." + h:    "",
		"0.0.0.0_9080":             "",
	}
	for name, want := range cases {
		if got := ResourceHost(name); got != want {
			t.Errorf("ResourceHost(%q) = %q, want %q", name, got, want)
		}
	}
}
