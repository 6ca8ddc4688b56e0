package file

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// validateSchema checks the JSON of a whole Istio object against its CRD,
// in namespace ns (the object's, defaulted).
func validateSchema(j []byte, ns string, v *validation.Validator, gvk validation.GVK) []fieldError {
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return []fieldError{{err: fmt.Errorf("decode JSON: %w", err)}}
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		meta["namespace"] = ns
	}
	errs, err := v.Object(context.Background(), gvk, obj)
	if err != nil {
		return []fieldError{{field: "apiVersion", err: err}}
	}
	return fieldErrors(errs)
}

func fieldErrors(errs []validation.FieldError) []fieldError {
	out := make([]fieldError, 0, len(errs))
	for _, e := range errs {
		out = append(out, fieldError{field: e.Field, err: errors.New(e.Message)})
	}
	return out
}

func validateKubeService(svc *corev1.Service) []fieldError {
	var errs []fieldError
	for i, p := range svc.Spec.Ports {
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, fieldErr(fmt.Sprintf("spec.ports[%d].port", i), "must be between 1 and 65535, got %d", p.Port))
		}
	}
	return errs
}
