package preview

import (
	"bytes"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/protodiff"
	"github.com/meshpilot/meshpilot/internal/redact"
	"github.com/meshpilot/meshpilot/model"
)

// TypeDiff is what would change of one xDS type for one proxy.
type TypeDiff struct {
	// Type is the short name (CDS, EDS, LDS, RDS, SDS, NDS, ECDS).
	Type    string `json:"type"`
	TypeURL string `json:"typeUrl"`
	// Added and Removed are resource names, sorted.
	Added   []string       `json:"added,omitempty"`
	Removed []string       `json:"removed,omitempty"`
	Changed []ResourceDiff `json:"changed,omitempty"`
	// Error is set when generation fails after the change, or failed before it.
	Error string `json:"error,omitempty"`
	// Invalid lists the added or changed resources that would fail
	// go-control-plane's ValidateAll (a proxy would NACK them), "NAME: why".
	Invalid []string `json:"invalid,omitempty"`
}

func (t *TypeDiff) changed() bool {
	return len(t.Added)+len(t.Removed)+len(t.Changed) > 0 || t.Error != ""
}

// entryOverhead is what one listed entry adds to the JSON answer besides
// its strings (quotes, keys, punctuation), roughly.
const entryOverhead = 16

// size is roughly the bytes t adds to the answer (Options.MaxResultBytes).
func (t *TypeDiff) size() int64 {
	n := len(t.Type) + len(t.TypeURL) + len(t.Error) + 4*entryOverhead
	for _, l := range [][]string{t.Added, t.Removed, t.Invalid} {
		for _, s := range l {
			n += len(s) + entryOverhead
		}
	}
	for _, r := range t.Changed {
		n += len(r.Name) + entryOverhead
		for _, c := range r.Changes {
			n += len(c.Path) + len(c.Old) + len(c.New) + 3*entryOverhead
		}
	}
	return int64(n)
}

// ResourceDiff lists the changed fields of one resource.
type ResourceDiff struct {
	Name    string             `json:"name"`
	Changes []protodiff.Change `json:"changes"`
	// Truncated says more changes were left out (Options.MaxChanges).
	Truncated bool `json:"truncated,omitempty"`
}

// redactedChange stands for a change found only in redacted fields.
var redactedChange = protodiff.Change{Path: "(sensitive fields)", Old: redact.Redacted, New: redact.Redacted + " (changed)"}

// diffResources fills t with the differences from old to cur, matched by
// resource name. Values are compared redacted (package redact): a change
// of a secret shows that it changed, never the secret.
func diffResources(t *TypeDiff, old, cur model.Resources, limit int) {
	before := make(map[string]*anypb.Any, len(old))
	for _, r := range old {
		before[r.GetName()] = r.GetResource()
	}
	after := make(map[string]*anypb.Any, len(cur))
	for _, r := range cur {
		after[r.GetName()] = r.GetResource()
	}
	for name, a := range after {
		b, ok := before[name]
		if ok && b.GetTypeUrl() == a.GetTypeUrl() && bytes.Equal(b.GetValue(), a.GetValue()) {
			continue
		}
		if err := checkResource(a); err != nil {
			t.Invalid = append(t.Invalid, name+": "+err.Error())
		}
		if !ok {
			t.Added = append(t.Added, name)
			continue
		}
		changes, truncated := protodiff.Diff(redact.Copy(b), redact.Copy(a), limit)
		if len(changes) == 0 {
			// Same bytes modulo map order, or a change in redacted fields only.
			if differ(b, a) {
				changes = []protodiff.Change{redactedChange}
			} else {
				continue
			}
		}
		t.Changed = append(t.Changed, ResourceDiff{Name: name, Changes: changes, Truncated: truncated})
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			t.Removed = append(t.Removed, name)
		}
	}
	sort.Strings(t.Invalid)
	sort.Strings(t.Added)
	sort.Strings(t.Removed)
	sort.Slice(t.Changed, func(i, j int) bool { return t.Changed[i].Name < t.Changed[j].Name })
}

// differ reports whether two Anys hold different messages, compared
// unpacked (their bytes may differ by map order alone).
func differ(a, b *anypb.Any) bool {
	ua, errA := a.UnmarshalNew()
	ub, errB := b.UnmarshalNew()
	if errA != nil || errB != nil {
		return true
	}
	return !proto.Equal(ua, ub)
}
