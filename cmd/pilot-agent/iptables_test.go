package main

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// runIptablesCmd runs `pilot-agent istio-iptables` (or with clean
// istio-clean-iptables) with env as the environment and a pod address of
// the given family, and returns stdout.
func runIptablesCmd(t *testing.T, clean bool, env map[string]string, ipv6 bool, args ...string) (string, error) {
	t.Helper()
	localIP := func(bool) (netip.Addr, bool, error) {
		if ipv6 {
			return netip.MustParseAddr("fd00::2"), true, nil
		}
		return netip.MustParseAddr("10.0.0.2"), false, nil
	}
	cmd := newIptablesCommand(clean, func(k string) string { return env[k] }, localIP)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func assertLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, l := range want {
		if !strings.Contains(out, l+"\n") {
			t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

func TestIstioIptablesDryRunInjectionFlags(t *testing.T) {
	out, err := runIptablesCmd(t, false, nil, false, "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT",
		"-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020", "--log_output_level=default:info", "--log_as_json", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	assertLines(t, out, "# iptables-restore --noflush", "-A ISTIO_INBOUND -p tcp --dport 15020 -j RETURN",
		"-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN", "-A ISTIO_OUTPUT -j ISTIO_REDIRECT")
	if strings.Contains(out, "ip6tables") {
		t.Errorf("IPv6 rules for an IPv4 pod:\n%s", out)
	}
}

func TestIstioIptablesEnvFallbackAndFlagPrecedence(t *testing.T) {
	env := map[string]string{
		"ISTIO_INBOUND_PORTS":                 "8080",
		"ISTIO_META_DNS_CAPTURE":              "true",
		"ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE": "888",
		"PROXY_UID":                           "1000",
	}
	out, err := runIptablesCmd(t, false, env, true, "--proxy-uid", "1337",
		"--istio-service-cidr", "10.0.0.0/8,fd00::/8", "--capture-all-dns", "-n")
	if err != nil {
		t.Fatal(err)
	}
	assertLines(t, out,
		"-A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_IN_REDIRECT",
		"-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN",
		"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053",
		"-A ISTIO_OUTPUT -m owner --gid-owner 888 -j RETURN",
		"-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT",
		"# ip6tables-restore --noflush",
		"-A ISTIO_OUTPUT -d fd00::/8 -j ISTIO_REDIRECT",
	)
	if strings.Contains(out, "--uid-owner 1000") {
		t.Errorf("PROXY_UID won over --proxy-uid:\n%s", out)
	}
}

func TestIstioIptablesRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-m", "NAT", "-n"},
		{"-x", "*", "-n"},
		{"--network-namespace", "/nonexistent/netns", "-n"},
		{"-p", "http", "-n"},
		{"unexpected-arg", "-n"},
	} {
		if _, err := runIptablesCmd(t, false, nil, false, args...); err == nil {
			t.Errorf("istio-iptables %v succeeded", args)
		}
	}
}

func TestIstioCleanIptablesDryRun(t *testing.T) {
	out, err := runIptablesCmd(t, true, nil, false, "--dry-run", "-u", "1337", "-m", "TPROXY", "-b", "*")
	if err != nil {
		t.Fatal(err)
	}
	assertLines(t, out, "# dry run: would remove these rules and every ISTIO_* chain",
		"-A PREROUTING -p tcp -j ISTIO_INBOUND", "-A ISTIO_DIVERT -j ACCEPT")
}

func TestExitCodeError(t *testing.T) {
	var coded *exitCodeError
	err := error(&exitCodeError{code: validationExitCode, err: errors.New("x")})
	if !errors.As(err, &coded) || coded.code != 126 {
		t.Errorf("exitCodeError = %v", err)
	}
}
