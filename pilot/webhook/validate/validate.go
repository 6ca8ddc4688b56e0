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

// DefaultMaxErrors is how many field errors a denial lists by default; the
// rest are counted ("and 61980 more"). An object with tens of thousands of
// invalid fields would otherwise get an answer of many megabytes.
const DefaultMaxErrors = 20

// Options configure a Handler.
type Options struct {
	// MaxErrors bounds the field errors a denial lists, in its message and
	// its causes; 0 means DefaultMaxErrors. Each error's field and message
	// is cut at clientlog.MaxMessage bytes.
	MaxErrors int
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
	if opts.MaxErrors <= 0 {
		opts.MaxErrors = DefaultMaxErrors
	}
	return &Handler{opts: opts, log: log}
}

// Validate admits or denies req. CREATE and UPDATE are checked; other
// operations are admitted (and counted as unsupported_operation, as Istio).
// When ctx ends first, the work stops and the request is denied (nobody
// may be waiting for the answer any more, and an admission without a
// verdict must not pass).
func (h *Handler) Validate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if err := ctx.Err(); err != nil {
		return stopped(req, err)
	}
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
	if ctxErr := ctx.Err(); ctxErr != nil {
		h.log.Debug("validation stopped", clientlog.String("object", what), "error", ctxErr)
		return stopped(req, ctxErr)
	}
	if err != nil {
		h.opts.Metrics.failed(req, ReasonDecodeError)
		return deny(req, fmt.Sprintf("%s: %s", what, clientlog.Truncate(err.Error(), clientlog.MaxMessage)))
	}
	if len(checked.Errors) > 0 {
		h.opts.Metrics.failed(req, ReasonInvalid)
		listed, more := h.bounded(checked.Errors)
		h.log.Info("configuration denied", clientlog.String("object", what), clientlog.Message("errors", joinErrors(listed, more)))
		return denyFields(req, what, listed, more)
	}
	h.opts.Metrics.passed(req)
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	if h.opts.View != nil {
		resp.Warnings = warnings(ctx, h.opts.View, checked, what)
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

// bounded returns the first MaxErrors of errs, each cut to a bounded
// size, and how many more there are.
func (h *Handler) bounded(errs []validation.FieldError) ([]validation.FieldError, int) {
	n := min(len(errs), h.opts.MaxErrors)
	out := make([]validation.FieldError, n)
	for i, e := range errs[:n] {
		out[i] = validation.FieldError{
			Field:   clientlog.Truncate(e.Field, clientlog.MaxMessage),
			Message: clientlog.Truncate(e.Message, clientlog.MaxMessage),
		}
	}
	return out, len(errs) - n
}

// joinErrors lists errs and says how many more were left out.
func joinErrors(errs []validation.FieldError, more int) string {
	parts := make([]string, len(errs), len(errs)+1)
	for i, e := range errs {
		parts[i] = e.Error()
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more errors", more))
	}
	return strings.Join(parts, "; ")
}

// stopped denies req whose validation ended with its context.
func stopped(req *admissionv1.AdmissionRequest, err error) *admissionv1.AdmissionResponse {
	resp := deny(req, fmt.Sprintf("%s: validation stopped: %v", objectName(req), err))
	resp.Result.Reason, resp.Result.Code = metav1.StatusReasonTimeout, 504
	return resp
}

func deny(req *admissionv1.AdmissionRequest, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonBadRequest, Code: 400,
		Message: msg,
		Details: &metav1.StatusDetails{Name: req.Name, Group: req.Kind.Group, Kind: req.Kind.Kind},
	}}
}

// denyFields denies with the listed field errors in the message (the API
// server shows only the message) and as the status's causes; more is the
// count of those left out.
func denyFields(req *admissionv1.AdmissionRequest, what string, errs []validation.FieldError, more int) *admissionv1.AdmissionResponse {
	resp := deny(req, fmt.Sprintf("configuration is invalid: %s: %s", what, joinErrors(errs, more)))
	resp.Result.Reason = metav1.StatusReasonInvalid
	resp.Result.Code = 422
	for _, e := range errs {
		resp.Result.Details.Causes = append(resp.Result.Details.Causes, metav1.StatusCause{
			Type: metav1.CauseTypeFieldValueInvalid, Field: e.Field, Message: e.Message,
		})
	}
	return resp
}
