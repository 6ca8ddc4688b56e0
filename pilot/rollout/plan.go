// Package rollout holds back changes of config objects that ask for a
// progressive rollout (annotation meshpilot.io/rollout: canary): a change
// reaches a sample of its affected proxies first, and the rest only once
// every canary has accepted it. Istio has no such thing; it is opt-in.
//
// The Gate decides; the xDS server carries it out. Every proxy but the
// canaries is served from the Gate's stable view of the config store, in
// which a held object keeps its last admitted version (or is absent when it
// has none); canaries are served from the store as it is.
package rollout

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Annotations an object asks for a rollout with.
const (
	// Annotation is "canary" (10% of the affected proxies), "canary:N%",
	// or "canary:SELECTOR" with a Kubernetes label selector on the proxies'
	// labels ("canary:track=canary").
	Annotation = "meshpilot.io/rollout"
	// WindowAnnotation is how long canaries have to accept the change (a
	// Go duration, default DefaultWindow); a canary that has not ACKed by
	// then halts the rollout.
	WindowAnnotation = "meshpilot.io/rollout-window"
)

// Defaults of a Plan.
const (
	DefaultPercent = 10
	DefaultWindow  = 30 * time.Second
	// MaxWindow bounds WindowAnnotation: a held change is not held for days
	// by a typo.
	MaxWindow = time.Hour
)

// Plan is how an object asks to be rolled out.
type Plan struct {
	// Percent of the affected proxies that are canaries (at least one),
	// when Selector is nil.
	Percent int
	// Selector, when set, picks the canaries by the proxies' labels.
	Selector labels.Selector
	// Window is how long the canaries have to ACK.
	Window time.Duration
}

// ParsePlan reads the rollout annotations. It returns false when the
// object does not ask for a rollout, and an error naming the annotation
// when it asks in a way that cannot be carried out.
func ParsePlan(annotations map[string]string) (Plan, bool, error) {
	v, ok := annotations[Annotation]
	if !ok {
		return Plan{}, false, nil
	}
	p := Plan{Percent: DefaultPercent, Window: DefaultWindow}
	mode, sample, hasSample := strings.Cut(strings.TrimSpace(v), ":")
	if mode != "canary" {
		return p, true, fmt.Errorf("annotation %s: %q: want canary, canary:N%% or canary:SELECTOR", Annotation, clip(v))
	}
	switch {
	case !hasSample:
	case strings.HasSuffix(sample, "%"):
		n, err := strconv.Atoi(strings.TrimSuffix(sample, "%"))
		if err != nil || n < 1 || n > 100 {
			return p, true, fmt.Errorf("annotation %s: %q: the percentage must be a whole number from 1 to 100", Annotation, clip(v))
		}
		p.Percent = n
	default:
		sel, err := labels.Parse(sample)
		if err != nil {
			return p, true, fmt.Errorf("annotation %s: label selector %q: %w", Annotation, clip(sample), err)
		}
		if sel.Empty() {
			return p, true, fmt.Errorf("annotation %s: empty label selector", Annotation)
		}
		p.Selector = sel
	}
	if w, ok := annotations[WindowAnnotation]; ok {
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 || d > MaxWindow {
			return p, true, fmt.Errorf("annotation %s: %q: want a duration above 0 and at most %s", WindowAnnotation, clip(w), MaxWindow)
		}
		p.Window = d
	}
	return p, true, nil
}

// clip keeps error messages short whatever an annotation holds.
func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
