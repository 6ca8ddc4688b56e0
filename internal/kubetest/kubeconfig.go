package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig with one cluster, one bearer-token user
// and a current context to name in the environment's directory.
func (e *Env) writeKubeconfig(name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{
		Server:                   e.config.Host,
		CertificateAuthorityData: e.pki.caPEM,
	}
	cfg.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest", Namespace: "default"}
	cfg.CurrentContext = "kubetest"
	path := filepath.Join(e.dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("kubetest: write kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// KubeconfigFor writes a kubeconfig that authenticates with token (for
// example one from ServiceAccountToken) and returns its path.
func (e *Env) KubeconfigFor(t testing.TB, token string) string {
	t.Helper()
	f, err := os.CreateTemp(e.dir, "token-*.kubeconfig")
	if err != nil {
		t.Fatalf("kubetest: kubeconfig: %v", err)
	}
	name := filepath.Base(f.Name())
	if err := f.Close(); err != nil {
		t.Fatalf("kubetest: kubeconfig: %v", err)
	}
	path, err := e.writeKubeconfig(name, token)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
