// Package validation checks Istio config objects as strictly as a cluster
// does: first the rules of their CustomResourceDefinitions (OpenAPI schema
// and CEL x-kubernetes-validations, evaluated by the API server's own code
// from k8s.io/apiextensions-apiserver), then the rules istiod's validating
// webhook adds in Go (pkg/config/validation in Istio), with first those
// that keep Envoy from rejecting the config: regexes Envoy's RE2 accepts,
// durations Envoy and protobuf can hold. The file config source and the
// validating webhook share it, so both give the same verdicts.
package validation

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"

	chart "github.com/meshpilot/meshpilot/charts/meshpilot"
)

// FieldError is one reason an object is refused.
type FieldError struct {
	// Field is the path of the offending field, as the API server writes it
	// ("spec.http[0].match[0].uri.regex"); empty when the error concerns
	// the whole object.
	Field string
	// Message says what is wrong.
	Message string
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Options tunes the checks that depend on how proxies are configured.
type Options struct {
	// MaxRegexProgramSize is the largest RE2 program size accepted for a
	// regex; 0 means ProxyMaxRegexProgramSize, negative means no limit.
	MaxRegexProgramSize int
	// GatewayAPI validates specs translated from the Kubernetes Gateway
	// API, which allows what a written Istio spec may not: the CORS
	// method "*" (HTTPRoute's CORS filter; Envoy sends it as the
	// header's value), and relative weights (a backendRef's weight is
	// up to 1,000,000, and those of a rule need not add up to 100: two
	// backends without one are 1 and 1; istiod serves them as given).
	GatewayAPI bool
}

// Validator validates Istio objects. It is safe for concurrent use. It
// compiles a kind's CRD schema and CEL rules the first time it sees the kind.
type Validator struct {
	crds *crdSet
	opts Options
}

// New returns a Validator of the CRDs the meshpilot chart installs.
func New(opts Options) *Validator {
	return newValidator(chart.CRDs(), opts)
}

func newValidator(crds string, opts Options) *Validator {
	if opts.MaxRegexProgramSize == 0 {
		opts.MaxRegexProgramSize = ProxyMaxRegexProgramSize
	}
	return &Validator{crds: newCRDSet(crds), opts: opts}
}

// Object validates a whole custom resource (apiVersion, kind, metadata,
// spec) in the unstructured form k8s.io/apimachinery/pkg/util/json decodes
// JSON into, against its CRD, as the API server does on create with strict
// field validation (kubectl's default): fields the schema does not declare
// are refused before any other check. It applies
// the schema's defaults to obj. It fails when no CRD of the chart defines
// gvk, or the CRD cannot be compiled.
func (v *Validator) Object(ctx context.Context, gvk GVK, obj map[string]any) ([]FieldError, error) {
	s, err := v.crds.schema(gvk)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("no CustomResourceDefinition for %s", gvk)
	}
	if unknown := s.unknownFields(obj); len(unknown) > 0 {
		return unknown, nil
	}
	return fromFieldErrors(s.validate(ctx, obj)), nil
}

// Meta is what Istio's Go rules read from an object's metadata.
type Meta struct {
	Name, Namespace string
	Annotations     map[string]string
}

// Spec applies Istio's Go-level rules to the decoded spec of an object
// (an istio.io/api message). Kinds without Go-level rules pass.
func (v *Validator) Spec(meta Meta, spec proto.Message) []FieldError {
	c := &checker{opts: v.opts, meta: meta}
	c.spec(spec)
	return c.errs
}

func fromFieldErrors(list field.ErrorList) []FieldError {
	out := make([]FieldError, 0, len(list))
	for _, e := range list {
		path, msg := e.Field, e.ErrorBody()
		if path == "" || path == "<nil>" {
			// A note on the whole object ("some validation rules were not
			// checked ..."): no field, no value to show.
			path, msg = "", e.Detail
		}
		out = append(out, FieldError{Field: path, Message: msg})
	}
	return out
}

// checker collects the errors of one object's Go-level rules.
type checker struct {
	opts Options
	meta Meta
	errs []FieldError
}

func (c *checker) add(path, format string, args ...any) {
	c.errs = append(c.errs, FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

// addErr records err, if any, at path.
func (c *checker) addErr(path string, err error) {
	if err != nil {
		c.errs = append(c.errs, FieldError{Field: path, Message: err.Error()})
	}
}

// at joins path elements: at("spec.http", 0, "match") is "spec.http[0].match".
func at(parts ...any) string {
	var b strings.Builder
	for _, p := range parts {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		case string:
			if b.Len() > 0 && !strings.HasPrefix(p, "[") {
				b.WriteByte('.')
			}
			b.WriteString(p)
		}
	}
	return b.String()
}

// key is the path element of a map key: at("spec.ports", key("http")) is
// "spec.ports[http]", as the API server writes map keys.
func key(k string) string { return "[" + k + "]" }
