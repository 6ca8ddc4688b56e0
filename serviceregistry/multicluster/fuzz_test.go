package multicluster

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// FuzzKubeconfig feeds remote-secret kubeconfigs (untrusted: anyone who may
// write Secrets in the control plane's namespace) to restConfigFor. It
// never panics; what it accepts carries no exec or auth-provider plugin,
// no credential, CA or proxy taken from elsewhere than the kubeconfig
// itself, in the parsed kubeconfig or the client configuration built from
// it; and its errors never quote the secret marker "s3cr3t" the seeds
// carry. Seeds also in testdata/fuzz/FuzzKubeconfig.
func FuzzKubeconfig(f *testing.F) {
	for _, user := range []string{
		"token: s3cr3t-token",
		"client-certificate-data: czNjcjN0\n    client-key-data: czNjcjN0",
		"username: admin\n    password: s3cr3t",
		"exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/s3cr3t}",
		"auth-provider: {name: gcp, config: {access-token: s3cr3t}}",
		"tokenFile: /var/run/secrets/s3cr3t",
		"client-certificate: /etc/s3cr3t.pem",
		"client-key: /etc/s3cr3t.key",
	} {
		f.Add(kubeconfigWith("", user))
	}
	f.Add(kubeconfigWith("czNjcjN0", "token: s3cr3t"))
	f.Add([]byte(strings.Replace(string(kubeconfigWith("", "token: s3cr3t")), "server: https://10.0.0.1:6443",
		"server: https://10.0.0.1:6443\n    proxy-url: http://s3cr3t:8080\n    certificate-authority: /etc/s3cr3t-ca.pem", 1)))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Config","users":[{"name":"u","user":{"exec":{"command":"s3cr3t"}}}]}`))
	f.Add([]byte("{{{ s3cr3t"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, kubeconfig []byte) {
		rc, err := restConfigFor(kubeconfig)
		if err != nil {
			if strings.Contains(err.Error(), "s3cr3t") && strings.Contains(string(kubeconfig), "s3cr3t") {
				t.Fatalf("error quotes the kubeconfig: %q", err.Error())
			}
			return
		}
		switch {
		case rc.ExecProvider != nil:
			t.Fatal("accepted an exec credential plugin")
		case rc.AuthProvider != nil:
			t.Fatal("accepted an auth-provider plugin")
		case rc.BearerTokenFile != "":
			t.Fatalf("accepted a token file %q", rc.BearerTokenFile)
		case rc.CertFile != "" || rc.KeyFile != "" || rc.CAFile != "":
			t.Fatalf("accepted files: cert %q key %q CA %q", rc.CertFile, rc.KeyFile, rc.CAFile)
		case rc.Proxy != nil:
			t.Fatal("accepted a proxy")
		}
		cfg, err := clientcmd.Load(kubeconfig)
		if err != nil {
			t.Fatalf("accepted a kubeconfig that does not load: %v", err)
		}
		for name, a := range cfg.AuthInfos {
			if a.Exec != nil || a.AuthProvider != nil || a.TokenFile != "" || a.ClientCertificate != "" || a.ClientKey != "" {
				t.Fatalf("accepted user %q with a plugin or a file", name)
			}
		}
		for name, c := range cfg.Clusters {
			if c.CertificateAuthority != "" || c.ProxyURL != "" {
				t.Fatalf("accepted cluster %q with a CA file or a proxy", name)
			}
		}
	})
}
