package multicluster

import (
	"strings"
	"testing"
)

const inlineKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: remote
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: %s
users:
- name: reader
  user:
    %s
contexts:
- name: remote
  context: {cluster: remote, user: reader}
current-context: remote
`

func kubeconfigWith(caData, user string) []byte {
	s := strings.Replace(inlineKubeconfig, "%s", caData, 1)
	return []byte(strings.Replace(s, "%s", user, 1))
}

func TestRestConfigForInlineCredentials(t *testing.T) {
	rc, err := restConfigFor(kubeconfigWith("", "token: s3cr3t-token"))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.0.0.1:6443" || rc.BearerToken != "s3cr3t-token" {
		t.Errorf("host %q token %q, want the kubeconfig's", rc.Host, rc.BearerToken)
	}
	if rc.QPS != 100 || rc.Burst != 200 {
		t.Errorf("QPS %v burst %v, want 100 and 200 (informers list everything at start)", rc.QPS, rc.Burst)
	}
}

// TestRestConfigForRefusesWhatIsNotInline: a remote secret is written by
// whoever may write Secrets in the control plane's namespace; it must not
// make the control plane run commands or read its own files. Errors name
// the part refused and never quote the kubeconfig.
func TestRestConfigForRefusesWhatIsNotInline(t *testing.T) {
	for _, tc := range []struct {
		name, kubeconfig, want string
	}{
		{"empty", "", "empty kubeconfig"},
		{"not YAML", "{{{ s3cr3t", "does not parse"},
		{"exec plugin", string(kubeconfigWith("", "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/s3cr3t}")), "exec credential plugins"},
		{"auth provider", string(kubeconfigWith("", "auth-provider: {name: gcp, config: {access-token: s3cr3t}}")), "auth-provider plugins"},
		{"token file", string(kubeconfigWith("", "tokenFile: /var/run/secrets/s3cr3t")), "credentials from files"},
		{"client certificate file", string(kubeconfigWith("", "client-certificate: /etc/s3cr3t.pem")), "credentials from files"},
		{"no current context", "apiVersion: v1\nkind: Config\n", "kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := restConfigFor([]byte(tc.kubeconfig))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error %q quotes the kubeconfig", err)
			}
		})
	}
	caFile := strings.Replace(string(kubeconfigWith("", "token: t")), "certificate-authority-data: \n", "certificate-authority: /etc/ca.pem\n", 1)
	if _, err := restConfigFor([]byte(caFile)); err == nil || !strings.Contains(err.Error(), "certificate-authority from a file") {
		t.Errorf("CA file: error %v, want it refused", err)
	}
}
