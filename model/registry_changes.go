package model

// RegistryChanges is what a registry reports after it absorbed new input:
// services whose definition changed (Kind KindService, Name = hostname), and
// services whose endpoints alone changed (Kind KindEndpoints).
type RegistryChanges struct {
	Services  []ConfigKey
	Endpoints []ConfigKey
}

// Empty reports whether nothing changed.
func (c RegistryChanges) Empty() bool { return len(c.Services) == 0 && len(c.Endpoints) == 0 }
