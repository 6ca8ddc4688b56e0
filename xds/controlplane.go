package xds

import (
	"encoding/json"
	"os"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/meshpilot/meshpilot/internal/version"
)

// ControlPlaneInstance is the JSON in the control_plane.identifier of every
// response, in Istio's shape (pilot/pkg/xds IstioControlPlaneInstance):
// istioctl decodes it to name the instance that answered (ID) and its
// version (Info.version). The field names carry no JSON tags in Istio, so
// the keys are "Component", "ID" and "Info".
type ControlPlaneInstance struct {
	// Component is always "istiod": istioctl expects it.
	Component string
	// ID names this replica: its pod name, else the host name.
	ID   string
	Info BuildInfo
}

// BuildInfo is Istio's version.BuildInfo, with its JSON keys.
type BuildInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

// newControlPlane builds the control_plane sent on every response, once per
// server: responses share it and nothing modifies it. An empty id takes the
// host name.
func newControlPlane(id string) (*corev3.ControlPlane, ControlPlaneInstance) {
	if id == "" {
		id, _ = os.Hostname()
	}
	b := version.Current()
	inst := ControlPlaneInstance{
		Component: "istiod",
		ID:        id,
		Info: BuildInfo{
			Version: b.Version, GitRevision: b.Revision, GolangVersion: b.GolangVersion,
			BuildStatus: b.Status, GitTag: b.Version,
		},
	}
	// Marshalling a struct of strings cannot fail.
	js, _ := json.Marshal(inst)
	return &corev3.ControlPlane{Identifier: string(js)}, inst
}
