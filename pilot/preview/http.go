package preview

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// Register adds POST /debug/preview to mux. The body is the YAML of the
// objects to create or replace (at most MaxBody bytes); each delete query
// parameter names one object to delete ("VirtualService/default/reviews");
// proxy parameters, when given, limit the preview to those proxies
// (connection or node IDs).
// The answer is a Result as JSON: 200 when computed (Result.Partial when
// the deadline or a budget ran out first), 422 when an object is invalid
// (Result.Errors), 400 for a malformed request, 413 for a body over the
// limit, 429 while another preview runs, 503 before the server is ready.
// Cross-site requests are refused (403), as the console's /ui/preview
// refuses them.
func (p *Previewer) Register(mux *http.ServeMux) {
	mux.Handle("POST /debug/preview", http.NewCrossOriginProtection().Handler(http.HandlerFunc(p.serveHTTP)))
}

func (p *Previewer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.opts.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "preview: body over the "+strconv.FormatInt(p.opts.MaxBody, 10)+"-byte limit", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "preview: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	res, err := p.Preview(r.Context(), Request{YAML: body, Delete: q["delete"], Proxies: q["proxy"]})
	var reqErr *RequestError
	switch {
	case errors.Is(err, ErrBusy):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "preview: "+err.Error(), http.StatusTooManyRequests)
		return
	case errors.As(err, &reqErr):
		http.Error(w, "preview: "+err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, ErrNotReady):
		http.Error(w, "preview: "+err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		// Cancelled: the client went away.
		http.Error(w, "preview: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !res.Valid {
		w.WriteHeader(http.StatusUnprocessableEntity)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		p.log.Warn("writing preview response failed", "error", err)
	}
}
