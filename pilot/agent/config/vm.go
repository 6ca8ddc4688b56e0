package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Istio's VM files, where its VM installation guide puts what
// `istioctl x workload entry configure` generates, relative to the agent's
// working directory ("/" on the VM). The token and the root certificate's
// other home are DefaultTokenFile and DefaultRootCertFile.
const (
	// VMClusterEnvFile is cluster.env: the agent's variables
	// (POD_NAMESPACE, SERVICE_ACCOUNT, ISTIO_META_*, ...).
	VMClusterEnvFile = "./var/lib/istio/envoy/cluster.env"
	// VMMeshConfigFile is mesh.yaml: its defaultConfig is the proxy's
	// ProxyConfig (discoveryAddress, proxyMetadata, readinessProbe).
	VMMeshConfigFile = "./etc/istio/config/mesh"
	// VMRootCertFile is root-cert.pem: the mesh's root, to trust the
	// control plane.
	VMRootCertFile = "./etc/certs/root-cert.pem"
)

// maxVMFile bounds the size of a VM file read.
const maxVMFile = 1 << 20

// VMFiles are the contents of Istio's VM files under one root.
type VMFiles struct {
	// Env holds cluster.env's variables.
	Env map[string]string
	// ProxyConfig is mesh.yaml's defaultConfig as YAML ("" when absent).
	ProxyConfig string
	// RootCertFile is the root certificate's path under root ("" when absent).
	RootCertFile string
}

// ReadVMFiles reads Istio's VM files under root (the VM's "/"). ok is false
// when cluster.env is not there: the agent does not run on a VM installed
// by Istio's guide. mesh.yaml and root-cert.pem may be missing.
func ReadVMFiles(root string) (files VMFiles, ok bool, err error) {
	raw, err := readSmall(filepath.Join(root, VMClusterEnvFile))
	if errors.Is(err, fs.ErrNotExist) {
		return VMFiles{}, false, nil
	}
	if err != nil {
		return VMFiles{}, false, err
	}
	if files.Env, err = parseClusterEnv(raw); err != nil {
		return VMFiles{}, false, fmt.Errorf("%s: %w", VMClusterEnvFile, err)
	}
	mesh, err := readSmall(filepath.Join(root, VMMeshConfigFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return VMFiles{}, false, err
	default:
		var m struct {
			DefaultConfig map[string]any `json:"defaultConfig"`
		}
		if err := yaml.Unmarshal(mesh, &m); err != nil {
			return VMFiles{}, false, fmt.Errorf("%s: %w", VMMeshConfigFile, err)
		}
		if m.DefaultConfig != nil {
			pc, err := yaml.Marshal(m.DefaultConfig)
			if err != nil {
				return VMFiles{}, false, fmt.Errorf("%s: defaultConfig: %w", VMMeshConfigFile, err)
			}
			files.ProxyConfig = string(pc)
		}
	}
	if _, err := os.Stat(filepath.Join(root, VMRootCertFile)); err == nil {
		files.RootCertFile = filepath.Join(root, VMRootCertFile)
	}
	return files, true, nil
}

// Environ returns environ (KEY=VALUE, the process's) with cluster.env's
// variables and mesh.yaml's PROXY_CONFIG added where environ lacks them:
// the process environment wins, as a systemd unit's Environment= would.
func (f VMFiles) Environ(environ []string) []string {
	have := map[string]bool{}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		have[k] = true
	}
	out := append([]string(nil), environ...)
	add := func(k, v string) {
		if !have[k] {
			out = append(out, k+"="+v)
			have[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(f.Env)) {
		add(k, f.Env[k])
	}
	if f.ProxyConfig != "" {
		add("PROXY_CONFIG", f.ProxyConfig)
	}
	return out
}

// ApplyRootCert points c at the VM's root certificate when the path of a
// pod's (DefaultRootCertFile) holds none.
func (f VMFiles) ApplyRootCert(c *Config) {
	if f.RootCertFile == "" {
		return
	}
	if _, err := os.Stat(c.RootCertFile); err != nil {
		c.RootCertFile = f.RootCertFile
	}
}

// readSmall reads a file of at most maxVMFile bytes.
func readSmall(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(fh, maxVMFile+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if buf.Len() > maxVMFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxVMFile)
	}
	return buf.Bytes(), nil
}

// parseClusterEnv reads KEY=VALUE lines as istioctl writes them (values in
// single quotes) or as a shell would source them (double quotes, none);
// blank lines and # comments are skipped.
func parseClusterEnv(raw []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), maxVMFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t'\"") {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
