package kubetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Versions hack/testenv.sh installs; the cache directories are keyed by them.
const (
	// KubeVersion is the kube-apiserver version built by hack/testenv.sh.
	KubeVersion = "v1.37.2"
	// HelmVersion is the helm version installed by hack/testenv.sh.
	HelmVersion = "v3.22.0"
)

// Environment variables that point at the binaries; `hack/testenv.sh env`
// prints them.
const (
	EnvEtcd          = "MESHPILOT_ETCD"
	EnvKubeAPIServer = "MESHPILOT_KUBE_APISERVER"
	EnvHelm          = "MESHPILOT_HELM"
)

const installHint = "run `make testenv` (hack/testenv.sh install)"

// Binaries holds the absolute paths of the test environment's programs.
type Binaries struct {
	Etcd          string
	KubeAPIServer string
	Helm          string
}

// FindBinaries locates etcd, kube-apiserver and helm: first the MESHPILOT_*
// variables, then the hack/testenv.sh cache
// (${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot/NAME-VERSION/NAME), then PATH
// for etcd (the Debian package installs it there). The error names every
// missing program and says how to install them.
func FindBinaries() (Binaries, error) {
	var errs []error
	var b Binaries
	b.Etcd, errs = find(errs, EnvEtcd, "etcd", "", true)
	b.KubeAPIServer, errs = find(errs, EnvKubeAPIServer, "kube-apiserver", KubeVersion, false)
	b.Helm, errs = find(errs, EnvHelm, "helm", HelmVersion, false)
	return b, missing(errs)
}

// findServer is FindBinaries without helm, which only helm tests need.
func findServer() (Binaries, error) {
	var errs []error
	var b Binaries
	b.Etcd, errs = find(errs, EnvEtcd, "etcd", "", true)
	b.KubeAPIServer, errs = find(errs, EnvKubeAPIServer, "kube-apiserver", KubeVersion, false)
	return b, missing(errs)
}

// HelmPath locates helm the way FindBinaries does.
func HelmPath() (string, error) {
	p, errs := find(nil, EnvHelm, "helm", HelmVersion, false)
	return p, missing(errs)
}

func missing(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("kubetest: test environment not installed; %s: %w", installHint, errors.Join(errs...))
}

func find(errs []error, envVar, name, version string, onPath bool) (string, []error) {
	if p := os.Getenv(envVar); p != "" {
		if err := executable(p); err != nil {
			return "", append(errs, fmt.Errorf("%s=%s: %w", envVar, p, err))
		}
		return p, errs
	}
	var tried []string
	if version != "" {
		if dir, err := CacheDir(); err == nil {
			p := filepath.Join(dir, name+"-"+version, name)
			if executable(p) == nil {
				return p, errs
			}
			tried = append(tried, p)
		}
	}
	if onPath {
		if p, err := exec.LookPath(name); err == nil {
			return p, errs
		}
		tried = append(tried, "PATH")
	}
	return "", append(errs, fmt.Errorf("%s not found (%s unset; tried %v)", name, envVar, tried))
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// CacheDir is where hack/testenv.sh keeps built binaries:
// ${XDG_CACHE_HOME:-$HOME/.cache}/meshpilot.
func CacheDir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "meshpilot"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("kubetest: cache dir: %w", err)
	}
	return filepath.Join(home, ".cache", "meshpilot"), nil
}

// Helm returns the path of helm, failing t with how to install it if missing.
func Helm(t testing.TB) string {
	t.Helper()
	p, err := HelmPath()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
