package bootstrap

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"
)

func TestKeepaliveServerParameters(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   KeepaliveOptions
		want keepalive.ServerParameters
	}{
		{"defaults", DefaultKeepaliveOptions(), keepalive.ServerParameters{
			Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionAge: NoMaxConnectionAge, MaxConnectionAgeGrace: 10 * time.Second}},
		{"zero takes defaults", KeepaliveOptions{}, keepalive.ServerParameters{
			Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionAge: NoMaxConnectionAge, MaxConnectionAgeGrace: 10 * time.Second}},
		{"chart's 30m", KeepaliveOptions{Interval: 20 * time.Second, Timeout: 5 * time.Second, MaxServerConnectionAge: 30 * time.Minute},
			keepalive.ServerParameters{Time: 20 * time.Second, Timeout: 5 * time.Second, MaxConnectionAge: 30 * time.Minute, MaxConnectionAgeGrace: 10 * time.Second}},
	} {
		if got := tc.in.serverParameters(); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	o := DefaultOptions()
	o.ConfigDir = t.TempDir()
	o.Keepalive.Timeout = -time.Second
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--keepaliveTimeout") {
		t.Errorf("negative timeout: %v, want an error naming --keepaliveTimeout", err)
	}
}
