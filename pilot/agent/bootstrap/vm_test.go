package bootstrap

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meshpilot/meshpilot/pilot/agent/config"
)

// writeVMFiles lays out, under root, the files Istio's VM guide installs
// (as `istioctl x workload entry configure --autoregister` writes them).
func writeVMFiles(t *testing.T, root string) {
	t.Helper()
	files := map[string]string{
		config.VMClusterEnvFile: `CANONICAL_REVISION='latest'
CANONICAL_SERVICE='billing'
ISTIO_INBOUND_PORTS='*'
ISTIO_LOCAL_EXCLUDE_PORTS='15090,15021,15020'
ISTIO_METAJSON_LABELS='{"app":"billing","service.istio.io/canonical-name":"billing"}'
ISTIO_META_AUTO_REGISTER_GROUP='billing'
ISTIO_META_CLUSTER_ID='Kubernetes'
ISTIO_META_DNS_CAPTURE='true'
ISTIO_META_MESH_ID='mesh1'
ISTIO_META_NETWORK='vm-network'
ISTIO_META_WORKLOAD_NAME='billing'
ISTIO_NAMESPACE='vms'
ISTIO_SERVICE='billing.vms'
ISTIO_SERVICE_CIDR='*'
POD_NAMESPACE='vms'
SERVICE_ACCOUNT='billing-vm'
TRUST_DOMAIN='cluster.local'
`,
		config.VMMeshConfigFile: `defaultConfig:
  discoveryAddress: istiod.istio-system.svc:15012
  meshId: mesh1
  proxyMetadata:
    CANONICAL_REVISION: latest
    CANONICAL_SERVICE: billing
    ISTIO_META_AUTO_REGISTER_GROUP: billing
    POD_NAMESPACE: vms
  readinessProbe:
    httpGet:
      path: /ready
      port: 8080
`,
		config.VMRootCertFile:   "-----BEGIN CERTIFICATE-----\n",
		config.DefaultTokenFile: "header.payload.signature",
	}
	for path, content := range files {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVMBootstrap: outside Kubernetes, with only Istio's VM files (no pod
// environment), the agent's node names the VM's namespace and service
// account and carries the WorkloadGroup, network and labels from
// cluster.env; the control plane's address comes from mesh.yaml; the root
// certificate from /etc/certs.
func TestVMBootstrap(t *testing.T) {
	root := t.TempDir()
	if _, onVM, err := config.ReadVMFiles(root); err != nil || onVM {
		t.Fatalf("no files: onVM %v, %v", onVM, err)
	}
	writeVMFiles(t, root)
	vm, onVM, err := config.ReadVMFiles(root)
	if err != nil || !onVM {
		t.Fatalf("ReadVMFiles: onVM %v, %v", onVM, err)
	}
	// The process environment wins over cluster.env.
	env := vm.Environ([]string{"INSTANCE_IP=192.168.1.20", "POD_NAME=billing-vm-1"})
	cfg, err := config.FromEnv("sidecar", func(string) string { return "" }, env)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RootCertFile = filepath.Join(root, config.DefaultRootCertFile)
	vm.ApplyRootCert(cfg)

	if cfg.PodNamespace != "vms" || cfg.ServiceAccount != "billing-vm" || cfg.SPIFFEID() != "spiffe://cluster.local/ns/vms/sa/billing-vm" {
		t.Fatalf("namespace %q, account %q, identity %q", cfg.PodNamespace, cfg.ServiceAccount, cfg.SPIFFEID())
	}
	if cfg.DiscoveryAddress != "istiod.istio-system.svc:15012" || cfg.ProxyConfig.GetReadinessProbe().GetHttpGet().GetPort() != 8080 {
		t.Fatalf("discovery %q, readiness probe %v: want mesh.yaml's", cfg.DiscoveryAddress, cfg.ProxyConfig.GetReadinessProbe())
	}
	if cfg.RootCertFile != filepath.Join(root, config.VMRootCertFile) {
		t.Fatalf("root certificate %q: want the VM's", cfg.RootCertFile)
	}
	if cfg.NodeID() != "sidecar~192.168.1.20~billing-vm-1.vms~vms.svc.cluster.local" {
		t.Fatalf("node ID %q", cfg.NodeID())
	}
	b, err := Envoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	md := b.GetNode().GetMetadata().GetFields()
	for k, want := range map[string]string{
		"AUTO_REGISTER_GROUP": "billing", "NETWORK": "vm-network", "NAMESPACE": "vms",
		"SERVICE_ACCOUNT": "billing-vm", "MESH_ID": "mesh1", "WORKLOAD_NAME": "billing",
	} {
		if got := md[k].GetStringValue(); got != want {
			t.Errorf("bootstrap node metadata %s = %q, want %q", k, got, want)
		}
	}
	if got := md["LABELS"].GetStructValue().GetFields()["app"].GetStringValue(); got != "billing" {
		t.Errorf("bootstrap node labels: app = %q", got)
	}
	if b.GetNode().GetId() != cfg.NodeID() {
		t.Errorf("bootstrap node %q", b.GetNode().GetId())
	}
}
