package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/clientlog"
)

// answer turns one admission request into a response; path is the URL path.
type answer func(ctx context.Context, path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// review wraps an answer with AdmissionReview decoding and encoding: POST
// only, JSON only, a bounded body, and 4xx answers naming what is wrong
// with a malformed review.
func (s *Server) review(endpoint string, fn answer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := s.log.With("endpoint", endpoint, "peer", r.RemoteAddr)
		ar, status, err := s.readReview(w, r)
		if err != nil {
			log.Warn("bad admission request", "status", status, clientlog.Error("error", err))
			s.httpError(endpoint, status)
			http.Error(w, err.Error(), status)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.reviewTimeout(r))
		defer cancel()
		resp := fn(ctx, r.URL.Path, ar.Request)
		if err := r.Context().Err(); err != nil {
			log.Debug("admission client gone before the answer", requestAttrs(ar.Request), "error", err)
			return
		}
		if resp == nil {
			log.Error("admission handler returned no response", requestAttrs(ar.Request))
			s.httpError(endpoint, http.StatusInternalServerError)
			http.Error(w, endpoint+": no admission response", http.StatusInternalServerError)
			return
		}
		resp.UID = ar.Request.UID
		out := admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp}
		body, err := json.Marshal(&out)
		if err != nil {
			log.Error("encode admission response", "error", err)
			s.httpError(endpoint, http.StatusInternalServerError)
			http.Error(w, "encode admission response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if endpoint == "validate" && len(body) > s.opts.MaxValidateResponseBytes {
			log.Error("admission response too large: sending it shortened", requestAttrs(ar.Request),
				"bytes", len(body), "max_bytes", s.opts.MaxValidateResponseBytes)
			out.Response = shortened(resp, s.opts.MaxValidateResponseBytes)
			if body, err = json.Marshal(&out); err != nil {
				s.httpError(endpoint, http.StatusInternalServerError)
				http.Error(w, "encode admission response: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write(body); err != nil {
			log.Debug("write admission response", "error", err)
		}
	})
}

// limitInFlight lets at most cap(slots) requests into h at once and
// answers the others 429 at once, asking to retry in a second; name is
// the endpoint ("validate", "inject"). Unlike istiod, which works on every
// request it gets: a review can take seconds and hundreds of MB.
func (s *Server) limitInFlight(name string, slots chan struct{}, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			s.log.Debug("webhook requests at their cap: answering 429", "endpoint", name, "peer", r.RemoteAddr, "max_in_flight", cap(slots))
			s.httpError(name, http.StatusTooManyRequests)
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("%d %s requests in flight already: retry", cap(slots), name), http.StatusTooManyRequests)
		}
	})
}

// reviewTimeout is how long one review may be worked on: the server's
// write timeout, or the timeout the API server puts in the URL
// (?timeout=10s, its webhook's timeoutSeconds) when shorter.
func (s *Server) reviewTimeout(r *http.Request) time.Duration {
	d := s.opts.Limits.WriteTimeout
	if d <= 0 {
		d = maxWebhookTimeout
	}
	if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 && t < d {
		d = t
	}
	return d
}

// shortened is resp, verdict kept, with its message cut and its causes and
// warnings left out, small enough to send.
func shortened(resp *admissionv1.AdmissionResponse, maxBytes int) *admissionv1.AdmissionResponse {
	out := &admissionv1.AdmissionResponse{UID: resp.UID, Allowed: resp.Allowed, Result: &metav1.Status{}}
	if resp.Result != nil {
		out.Result.Status, out.Result.Reason, out.Result.Code = resp.Result.Status, resp.Result.Reason, resp.Result.Code
		out.Result.Message = resp.Result.Message
	}
	out.Result.Message = clientlog.Truncate(out.Result.Message, min(maxBytes/8, clientlog.MaxMessage*4)) +
		" (answer shortened: it exceeded the webhook's response size limit)"
	return out
}

// httpError counts an HTTP error answer of /validate.
func (s *Server) httpError(endpoint string, status int) {
	if endpoint == "validate" && s.opts.ValidationHTTPErrors != nil {
		s.opts.ValidationHTTPErrors.WithLabelValues(strconv.Itoa(status)).Inc()
	}
}

// readReview decodes the body as an admission.k8s.io/v1 AdmissionReview
// with a request, or says what is wrong and the HTTP status to answer.
func (s *Server) readReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed: an AdmissionReview is POSTed", r.Method)
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return nil, http.StatusUnsupportedMediaType,
			fmt.Errorf("content type %q: want application/json", clientlog.Truncate(r.Header.Get("Content-Type"), clientlog.MaxValue))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", s.opts.MaxBodyBytes)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("read request body: %w", err)
	}
	if len(body) == 0 {
		return nil, http.StatusBadRequest, errors.New("empty body: want an AdmissionReview")
	}
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &ar); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: %s", clientlog.Truncate(err.Error(), clientlog.MaxMessage))
	}
	if gv := admissionv1.SchemeGroupVersion.String(); ar.APIVersion != gv || ar.Kind != "AdmissionReview" {
		return nil, http.StatusBadRequest, fmt.Errorf("apiVersion %q, kind %q: want %s AdmissionReview",
			clientlog.Truncate(ar.APIVersion, clientlog.MaxValue), clientlog.Truncate(ar.Kind, clientlog.MaxValue), gv)
	}
	if ar.Request == nil {
		return nil, http.StatusBadRequest, errors.New("AdmissionReview has no request")
	}
	return &ar, http.StatusOK, nil
}

// validate answers /validate.
func (s *Server) validate(ctx context.Context, _ string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if s.opts.Validator == nil {
		s.log.Warn("no validator configured: admitting unchecked", requestAttrs(req))
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	return s.opts.Validator.Validate(ctx, req)
}

// requestAttrs names the object under review, bounded for the log.
func requestAttrs(req *admissionv1.AdmissionRequest) slog.Attr {
	return slog.Group("object",
		clientlog.String("kind", req.Kind.Kind),
		clientlog.String("namespace", req.Namespace),
		clientlog.String("name", req.Name),
		clientlog.String("operation", string(req.Operation)))
}
