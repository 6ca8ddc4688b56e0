// Package validate answers the admission webhook's /validate: Istio config
// is admitted or denied by the same validation.Validator the file config
// source uses, and problems that involve other objects (a subset no
// DestinationRule defines, an unknown host, two DestinationRules for one
// host, a Gateway selecting no workload) come back as admission warnings,
// which kubectl and client-go print, read from the current PushContext.
package validate

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// View is the mesh as the control plane currently serves it; the bootstrap
// satisfies it.
type View interface {
	// PushContext is the snapshot in force; nil before the first one.
	PushContext() *model.PushContext
	// WorkloadSelected reports whether a workload of the mesh (a pod or a
	// WorkloadEntry) carries every label of selector; known is false when
	// the view cannot tell, and then nothing is warned.
	WorkloadSelected(selector map[string]string) (selected, known bool)
}

// Options configure a Handler.
type Options struct {
	// Validator is the shared validator (the file source's); required.
	Validator *validation.Validator
	// View gives the cross-object warnings; nil gives none.
	View View
	// Metrics counts verdicts; nil counts nothing.
	Metrics *Metrics
	Log     *slog.Logger
}

// Handler validates admission requests; it satisfies the webhook server's
// Validator interface.
type Handler struct {
	opts Options
	log  *slog.Logger
}

// New returns a Handler.
func New(opts Options) *Handler {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{opts: opts, log: log}
}

// Validate admits or denies req. CREATE and UPDATE are checked; other
// operations are admitted (and counted as unsupported_operation, as Istio).
func (h *Handler) Validate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		h.opts.Metrics.failed(req, ReasonUnsupportedOperation)
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	what := objectName(req)
	if len(req.Object.Raw) == 0 {
		h.opts.Metrics.failed(req, ReasonDecodeError)
		return deny(req, fmt.Sprintf("%s: the request carries no object", what))
	}
	if _, ok := validation.NewSpec(req.Kind.Group, req.Kind.Kind); !ok {
		h.opts.Metrics.failed(req, ReasonUnknownType)
		return deny(req, fmt.Sprintf("%s: unrecognized type %s/%s %s", what, req.Kind.Group, req.Kind.Version, req.Kind.Kind))
	}
	checked, err := h.opts.Validator.Check(ctx, req.Object.Raw)
	if err != nil {
		h.opts.Metrics.failed(req, ReasonDecodeError)
		return deny(req, fmt.Sprintf("%s: %s", what, clientlog.Truncate(err.Error(), clientlog.MaxMessage)))
	}
	if len(checked.Errors) > 0 {
		h.opts.Metrics.failed(req, ReasonInvalid)
		h.log.Info("configuration denied", clientlog.String("object", what), clientlog.Message("errors", joinErrors(checked.Errors)))
		return denyFields(req, what, checked.Errors)
	}
	h.opts.Metrics.passed(req)
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	if h.opts.View != nil {
		resp.Warnings = warnings(h.opts.View, checked, what)
	}
	return resp
}

// objectName is "Kind namespace/name" as the API server names the object.
func objectName(req *admissionv1.AdmissionRequest) string {
	name := req.Name
	if req.Namespace != "" {
		name = req.Namespace + "/" + name
	}
	return req.Kind.Kind + " " + name
}

func joinErrors(errs []validation.FieldError) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func deny(req *admissionv1.AdmissionRequest, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonBadRequest, Code: 400,
		Message: msg,
		Details: &metav1.StatusDetails{Name: req.Name, Group: req.Kind.Group, Kind: req.Kind.Kind},
	}}
}

// denyFields denies with every field error in the message (the API server
// shows only the message) and as the status's causes.
func denyFields(req *admissionv1.AdmissionRequest, what string, errs []validation.FieldError) *admissionv1.AdmissionResponse {
	resp := deny(req, fmt.Sprintf("configuration is invalid: %s: %s", what, joinErrors(errs)))
	resp.Result.Reason = metav1.StatusReasonInvalid
	resp.Result.Code = 422
	for _, e := range errs {
		resp.Result.Details.Causes = append(resp.Result.Details.Causes, metav1.StatusCause{
			Type: metav1.CauseTypeFieldValueInvalid, Field: e.Field, Message: e.Message,
		})
	}
	return resp
}
