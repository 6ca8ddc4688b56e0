package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// etcdHealthy checks etcd's /health endpoint on its client URL.
func etcdHealthy(clientURL string) func(context.Context) error {
	client := &http.Client{}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var health struct {
			Health string `json:"health"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
			return fmt.Errorf("etcd /health: %w", err)
		}
		if health.Health != "true" {
			return fmt.Errorf("etcd /health: health=%q", health.Health)
		}
		return nil
	}
}

// adminConfig is the client configuration of the static admin token user.
func (e *Env) adminConfig() (*rest.Config, error) {
	port := ""
	for _, a := range e.apiArgs {
		if v, ok := cutFlag(a, "--secure-port"); ok {
			port = v
		}
	}
	if port == "" {
		return nil, fmt.Errorf("kubetest: admin config: no --secure-port in the API server flags")
	}
	return &rest.Config{
		Host:            "https://127.0.0.1:" + port,
		BearerToken:     e.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caPEM},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}, nil
}

func cutFlag(arg, name string) (string, bool) {
	if len(arg) > len(name)+1 && arg[:len(name)+1] == name+"=" {
		return arg[len(name)+1:], true
	}
	return "", false
}

// apiReady checks the API server's /readyz as the admin.
func (e *Env) apiReady() (func(context.Context) error, error) {
	cfg, err := e.adminConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 0
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubetest: readiness client: %w", err)
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
		}
		return nil
	}, nil
}

// waitDefaultNamespace waits for the bootstrap controller to create the
// "default" namespace, which /readyz does not cover.
func (e *Env) waitDefaultNamespace(ctx context.Context) error {
	e.mu.Lock()
	p := e.apiserver
	e.mu.Unlock()
	return p.waitFor(ctx, e.startTimeout, "serving the default namespace", func(ctx context.Context) error {
		_, err := e.clientset.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err
	})
}
