package validation

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// GVK names one version of a kind: group "networking.istio.io", version
// "v1", kind "VirtualService".
type GVK struct {
	Group, Version, Kind string
}

func (g GVK) String() string { return g.Group + "/" + g.Version + ", Kind=" + g.Kind }

// crdSet evaluates custom resources against the schemas of a set of CRDs.
// It finds a kind's CRD and compiles its schema and CEL rules on first use.
type crdSet struct {
	raw string

	mu      sync.Mutex
	schemas map[GVK]*lazySchema
}

// lazySchema is the compiled schema of one GVK, built once.
type lazySchema struct {
	once   sync.Once
	schema *crdSchema
	err    error
}

// crdSchema is what the API server evaluates for one version of a CRD.
type crdSchema struct {
	structural *structuralschema.Structural
	openAPI    apiextensionsvalidation.SchemaValidator
	// cel is nil when the version declares no x-kubernetes-validations.
	cel *cel.Validator
}

func newCRDSet(raw string) *crdSet {
	return &crdSet{raw: raw, schemas: map[GVK]*lazySchema{}}
}

// schema returns the compiled schema of gvk; (nil, nil) when no CRD
// defines that group, kind and version.
func (s *crdSet) schema(gvk GVK) (*crdSchema, error) {
	s.mu.Lock()
	l := s.schemas[gvk]
	if l == nil {
		l = &lazySchema{}
		s.schemas[gvk] = l
	}
	s.mu.Unlock()
	l.once.Do(func() { l.schema, l.err = compileSchema(s.raw, gvk) })
	return l.schema, l.err
}

// crdDocument returns the YAML document of raw that defines group and kind,
// found by a textual scan so that only that CRD needs parsing.
func crdDocument(raw, group, kind string) string {
	groupLine := regexp.MustCompile(`(?m)^  group: ` + regexp.QuoteMeta(group) + `\s*$`)
	kindLine := regexp.MustCompile(`(?m)^    kind: ` + regexp.QuoteMeta(kind) + `\s*$`)
	for doc := range strings.SplitSeq(raw, "\n---\n") {
		if groupLine.MatchString(doc) && kindLine.MatchString(doc) {
			return doc
		}
	}
	return ""
}

// compileSchema parses the CRD of gvk and builds its validators the way the
// API server does when it starts serving the CRD.
func compileSchema(raw string, gvk GVK) (*crdSchema, error) {
	doc := crdDocument(raw, gvk.Group, gvk.Kind)
	if doc == "" {
		return nil, nil
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
		return nil, fmt.Errorf("CRD of %s: %w", gvk, err)
	}
	if crd.Spec.Group != gvk.Group || crd.Spec.Names.Kind != gvk.Kind {
		return nil, fmt.Errorf("CRD of %s: found %s of group %s", gvk, crd.Spec.Names.Kind, crd.Spec.Group)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != gvk.Version {
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("CRD %s version %s has no schema", crd.Name, v.Name)
		}
		var internal apiextensions.CustomResourceValidation
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, &internal, nil); err != nil {
			return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, v.Name, err)
		}
		structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("CRD %s version %s: structural schema: %w", crd.Name, v.Name, err)
		}
		structural = structural.DeepCopy()
		if err := structuraldefaulting.PruneDefaults(structural); err != nil {
			return nil, fmt.Errorf("CRD %s version %s: defaults: %w", crd.Name, v.Name, err)
		}
		openAPI, _, err := apiextensionsvalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("CRD %s version %s: schema validator: %w", crd.Name, v.Name, err)
		}
		return &crdSchema{
			structural: structural,
			openAPI:    openAPI,
			cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
		}, nil
	}
	return nil, nil
}

// validate checks obj, a whole custom resource in unstructured form, as the
// API server does on create: metadata, defaults, OpenAPI schema, list types,
// then the CEL rules unless an earlier error makes them meaningless. It
// applies the schema's defaults to obj.
func (c *crdSchema) validate(ctx context.Context, obj map[string]any) field.ErrorList {
	errs := validateMetadata(obj)
	structuraldefaulting.Default(obj, c.structural)
	errs = append(errs, apiextensionsvalidation.ValidateCustomResource(nil, obj, c.openAPI)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, c.structural, obj)...)
	if c.cel == nil {
		return errs
	}
	if blocked := blockingError(errs); blocked != nil {
		return append(errs, blocked)
	}
	celErrs, _ := c.cel.Validate(ctx, nil, c.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	for _, e := range celErrs {
		// Write the rule's field as API servers up to 1.31 did, and Istio's
		// fixtures expect: by its schema type, not its value
		// (`Invalid value: "object": only support ...`).
		if e.Type == field.ErrorTypeInvalid {
			if t := schemaTypeAt(c.structural, e.Field); t != "" {
				e.BadValue = t
			}
		}
	}
	return append(errs, celErrs...)
}

// fieldPathElement matches one element of a field path: a name, or an
// index or map key in brackets.
var fieldPathElement = regexp.MustCompile(`([^.\[\]]+)|\[([^\]]*)\]`)

// schemaTypeAt returns the type ("object", "integer", ...) the schema s
// gives the field at path ("spec.ports[0].number"), or "" when the path
// leaves the schema.
func schemaTypeAt(s *structuralschema.Structural, path string) string {
	for _, m := range fieldPathElement.FindAllStringSubmatch(path, -1) {
		if s == nil {
			return ""
		}
		switch {
		case m[1] != "":
			if p, ok := s.Properties[m[1]]; ok {
				s = &p
			} else if s.AdditionalProperties != nil {
				s = s.AdditionalProperties.Structural
			} else {
				return ""
			}
		case s.Items != nil:
			s = s.Items
		case s.AdditionalProperties != nil:
			s = s.AdditionalProperties.Structural
		default:
			return ""
		}
	}
	if s == nil {
		return ""
	}
	return s.Type
}

// unknownFields lists the fields of obj its schema does not declare, which
// an API server decoding strictly (kubectl's default) refuses before any
// validation. Metadata is left to the caller's strict decoding.
func (c *crdSchema) unknownFields(obj map[string]any) []FieldError {
	copied := runtime.DeepCopyJSON(obj)
	delete(copied, "metadata")
	paths := structuralpruning.PruneWithOptions(copied, c.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	errs := make([]FieldError, 0, len(paths))
	for _, p := range paths {
		name := p[strings.LastIndexAny(p, ".]")+1:]
		errs = append(errs, FieldError{Field: p, Message: fmt.Sprintf("unknown field %q", name)})
	}
	return errs
}

// blockingError returns the API server's note that CEL rules were skipped
// when errs holds an error of a type that makes them unsafe to evaluate.
func blockingError(errs field.ErrorList) *field.Error {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong,
			field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return nil
}

// validateMetadata applies the API server's ObjectMeta rules for a
// namespaced custom resource (name a DNS subdomain, labels, annotations).
func validateMetadata(obj map[string]any) field.ErrorList {
	raw, ok := obj["metadata"].(map[string]any)
	if !ok {
		return nil
	}
	var meta metav1.ObjectMeta
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &meta); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), nil, err.Error())}
	}
	return apivalidation.ValidateObjectMeta(&meta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}
