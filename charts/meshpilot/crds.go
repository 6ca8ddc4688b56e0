// Package meshpilot is the meshpilot Helm chart seen from Go: it embeds the
// chart's Istio CRDs so that config validation evaluates the very schemas
// and CEL rules the chart installs. Helm ignores this file (.helmignore).
package meshpilot

import _ "embed"

//go:embed crds/customresourcedefinitions.gen.yaml
var crds string

// CRDs returns the chart's CustomResourceDefinitions as multi-document YAML
// (crds/customresourcedefinitions.gen.yaml, written by `make crds`).
func CRDs() string { return crds }
