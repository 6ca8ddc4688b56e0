package model

import meshconfig "istio.io/api/mesh/v1alpha1"

// MeshConfig returns the mesh config a new PushContext uses: MeshSource's
// current value when set, else Mesh.
func (e *Environment) MeshConfig() *meshconfig.MeshConfig {
	if e.MeshSource != nil {
		return e.MeshSource()
	}
	return e.Mesh
}
