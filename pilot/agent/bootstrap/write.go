package bootstrap

import (
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshpilot/meshpilot/pilot/agent/config"
)

// EnvoyFileName is the Envoy bootstrap's name in cfg.ConfigDir, Istio's
// "envoy-rev.json".
const EnvoyFileName = "envoy-rev.json"

// EnvoyPath is where WriteEnvoy writes: cfg.ConfigDir/envoy-rev.json.
func EnvoyPath(cfg *config.Config) string {
	return filepath.Join(cfg.ConfigDir, EnvoyFileName)
}

// MarshalEnvoy renders Envoy(cfg) as indented JSON with the proto field
// names (snake_case, as Istio's envoy-rev.json). The typed configs' Any
// resolve through the go-control-plane types this package imports.
func MarshalEnvoy(cfg *config.Config) ([]byte, error) {
	b, err := Envoy(cfg)
	if err != nil {
		return nil, err
	}
	js, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("Envoy bootstrap: %w", err)
	}
	return js, nil
}

// WriteEnvoy writes Envoy(cfg) as JSON to EnvoyPath(cfg) atomically and
// returns the path.
func WriteEnvoy(cfg *config.Config) (string, error) {
	js, err := MarshalEnvoy(cfg)
	if err != nil {
		return "", err
	}
	path := EnvoyPath(cfg)
	if err := writeAtomic(path, js); err != nil {
		return "", fmt.Errorf("Envoy bootstrap: %w", err)
	}
	return path, nil
}

// WriteGRPC writes GRPC(cfg) to cfg.GRPCXDSBootstrap atomically and
// returns the path.
func WriteGRPC(cfg *config.Config) (string, error) {
	if cfg.GRPCXDSBootstrap == "" {
		return "", fmt.Errorf("gRPC xDS bootstrap: GRPC_XDS_BOOTSTRAP is empty")
	}
	js, err := GRPC(cfg)
	if err != nil {
		return "", err
	}
	if err := writeAtomic(cfg.GRPCXDSBootstrap, js); err != nil {
		return "", fmt.Errorf("gRPC xDS bootstrap: %w", err)
	}
	return cfg.GRPCXDSBootstrap, nil
}

// writeAtomic writes data to path through a temporary file in the same
// directory and a rename, so a reader sees the old file or the new one.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("rename to %s: %w", path, err)
	}
	return nil
}
