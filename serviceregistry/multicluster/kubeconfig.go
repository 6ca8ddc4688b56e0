package multicluster

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// restConfigFor builds the client configuration of a remote secret's
// kubeconfig. The kubeconfig is untrusted input (anyone who may write
// Secrets in the control plane's namespace): it may only carry its
// credentials inline; exec and auth-provider plugins (which would run
// commands or reach other services from the control plane) and paths of
// local files are refused. Errors never quote the kubeconfig.
func restConfigFor(kubeconfig []byte) (*rest.Config, error) {
	if len(kubeconfig) == 0 {
		return nil, errors.New("empty kubeconfig")
	}
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		// The decoder's message may quote the kubeconfig (a YAML value
		// in an unsupported key, for one): it is not passed on.
		return nil, errors.New("kubeconfig does not parse (YAML or JSON of kind Config expected)")
	}
	if err := checkInline(cfg); err != nil {
		return nil, err
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// Informers list everything at start; client-go's 5 QPS would throttle that.
	rc.QPS, rc.Burst = 100, 200
	rc.UserAgent = "pilot-discovery (meshpilot) remote cluster"
	return rc, nil
}

// checkInline refuses what would make the control plane run a plugin or
// read its own files for a remote cluster's credentials.
func checkInline(cfg *clientcmdapi.Config) error {
	for _, name := range sortedKeys(cfg.AuthInfos) {
		a := cfg.AuthInfos[name]
		switch {
		case a.Exec != nil:
			return fmt.Errorf("kubeconfig user %q: exec credential plugins are not allowed", name)
		case a.AuthProvider != nil:
			return fmt.Errorf("kubeconfig user %q: auth-provider plugins are not allowed", name)
		case a.TokenFile != "" || a.ClientCertificate != "" || a.ClientKey != "":
			return fmt.Errorf("kubeconfig user %q: credentials from files are not allowed (use token, client-certificate-data, client-key-data)", name)
		}
	}
	for _, name := range sortedKeys(cfg.Clusters) {
		c := cfg.Clusters[name]
		if c.CertificateAuthority != "" {
			return fmt.Errorf("kubeconfig cluster %q: certificate-authority from a file is not allowed (use certificate-authority-data)", name)
		}
		if c.ProxyURL != "" {
			return fmt.Errorf("kubeconfig cluster %q: proxy-url is not allowed", name)
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
