package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/internal/clientlog"
	"github.com/meshpilot/meshpilot/internal/redact"
)

// Limits on what one request may cost or show.
const (
	// MaxRows bounds the proxies and config objects one page lists.
	MaxRows = 1000
	// MaxPreviewBytes bounds the YAML one preview request may post.
	MaxPreviewBytes = 1 << 20
	// MaxResultBytes bounds the JSON an explain or preview answer shows.
	MaxResultBytes = 1 << 20
	// maxTypeLen and maxNameLen bound the explain form's type and name.
	maxTypeLen = 64
	maxNameLen = 1024
	// callTimeout bounds one Explain or Preview call.
	callTimeout = 30 * time.Second
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the pages under /ui/.
type Console struct {
	src   Sources
	log   *slog.Logger
	pages map[string]*template.Template
}

// New returns a console showing src, logging to log. It panics if the
// embedded templates do not parse, which the package's tests rule out.
func New(src Sources, log *slog.Logger) *Console {
	if log == nil {
		log = slog.Default()
	}
	funcs := template.FuncMap{
		"stateClass": func(s State) string { return strings.ToLower(strings.ReplaceAll(string(s), " ", "")) },
		"seconds":    func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) + "s" },
	}
	pages := map[string]*template.Template{}
	for _, p := range []string{"overview", "configs", "explain", "preview"} {
		pages[p] = template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html"))
	}
	return &Console{src: src, log: log, pages: pages}
}

// Register adds the console's routes under /ui/ to mux.
func (c *Console) Register(mux *http.ServeMux) {
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded directory is there by construction
	}
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /ui/{$}", c.overview)
	mux.HandleFunc("GET /ui/configs", c.configs)
	mux.HandleFunc("GET /ui/explain", c.explain)
	mux.HandleFunc("GET /ui/preview", c.previewForm)
	// Preview takes a body; refuse cross-site posts (Sec-Fetch-Site, Origin).
	mux.Handle("POST /ui/preview", http.NewCrossOriginProtection().Handler(http.HandlerFunc(c.preview)))
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
}

// page is what every template gets.
type page struct {
	Title string
	Nav   string
	Now   time.Time
	Data  any
}

func (c *Console) render(w http.ResponseWriter, code int, name, title string, data any) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// No script at all, nothing from elsewhere, never framed.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	var b strings.Builder
	if err := c.pages[name].Execute(&b, page{Title: title, Nav: name, Now: time.Now(), Data: data}); err != nil {
		c.log.Error("console page failed to render", "page", name, "error", err)
		http.Error(w, "rendering "+name+" failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// overviewData is the overview page: proxies and convergence.
type overviewData struct {
	Proxies          []proxyView
	ProxiesAvailable bool
	TotalProxies     int
	MoreProxies      int

	ConvergenceAvailable bool
	ConvergenceError     string
	Histogram            Histogram
	Chart                chart
	P50, P99             string
	Mean                 string
}

// proxyView is a ProxyRow with its age formatted.
type proxyView struct {
	ProxyRow
	Since string
}

func (c *Console) overview(w http.ResponseWriter, _ *http.Request) {
	var d overviewData
	now := time.Now()
	if c.src.Proxies != nil {
		d.ProxiesAvailable = true
		rows := c.src.Proxies()
		d.TotalProxies = len(rows)
		if len(rows) > MaxRows {
			d.MoreProxies = len(rows) - MaxRows
			rows = rows[:MaxRows]
		}
		for _, r := range rows {
			d.Proxies = append(d.Proxies, proxyView{ProxyRow: r, Since: since(now, r.ConnectedAt)})
		}
	}
	if c.src.Convergence != nil {
		d.ConvergenceAvailable = true
		h, err := c.src.Convergence()
		if err != nil {
			d.ConvergenceError = err.Error()
		} else {
			d.Histogram, d.Chart = h, drawChart(h)
			d.P50, d.P99 = quantileText(h, 0.5), quantileText(h, 0.99)
			if h.Count > 0 {
				d.Mean = strconv.FormatFloat(h.Sum/float64(h.Count), 'f', 3, 64) + "s"
			}
		}
	}
	c.render(w, http.StatusOK, "overview", "Proxies", d)
}

func quantileText(h Histogram, q float64) string {
	b, ok := h.Quantile(q)
	if !ok {
		return "—"
	}
	return Bucket{UpperBound: b}.Label(lastFinite(h))
}

// lastFinite is the largest finite bucket bound of h.
func lastFinite(h Histogram) float64 {
	if n := len(h.Buckets); n >= 2 {
		return h.Buckets[n-2].UpperBound
	}
	return 0
}

// configsData is the config objects page.
type configsData struct {
	Available bool
	Rows      []ConfigRow
	Total     int
	More      int
}

func (c *Console) configs(w http.ResponseWriter, _ *http.Request) {
	var d configsData
	if c.src.Configs != nil {
		d.Available = true
		rows := c.src.Configs()
		d.Total = len(rows)
		if len(rows) > MaxRows {
			d.More = len(rows) - MaxRows
			rows = rows[:MaxRows]
		}
		d.Rows = rows
	}
	c.render(w, http.StatusOK, "configs", "Config objects", d)
}

// explainData is the explain page: the form, and an answer once submitted.
type explainData struct {
	Available         bool
	ProxyID, Type     string
	Name              string
	Submitted         bool
	Result, Error     string
	ConnectedProxyIDs []string
}

// explainTypes are the types offered in the form.
var explainTypes = [...]string{"cds", "eds", "lds", "rds", "sds"}

func (d explainData) Types() []string { return explainTypes[:] }

func (c *Console) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := explainData{Available: c.src.Explain != nil, ProxyID: q.Get("proxy"), Type: q.Get("type"), Name: q.Get("name")}
	if c.src.Proxies != nil {
		for i, p := range c.src.Proxies() {
			if i == MaxRows {
				break
			}
			id := p.NodeID
			if strings.HasSuffix(id, "…") { // cut: only the connection ID finds it
				id = p.ConnectionID
			}
			d.ConnectedProxyIDs = append(d.ConnectedProxyIDs, id)
		}
	}
	d.Submitted = q.Has("proxy")
	if !d.Submitted {
		c.render(w, http.StatusOK, "explain", "Explain", d)
		return
	}
	// Echo the inputs cut, so a huge query costs nothing more to render.
	raw := d
	d.ProxyID = clientlog.Truncate(d.ProxyID, clientlog.MaxValue)
	d.Type, d.Name = clientlog.Truncate(d.Type, maxTypeLen), clientlog.Truncate(d.Name, maxNameLen)
	if err := validateExplain(raw.ProxyID, raw.Type, raw.Name); err != nil {
		d.Error = err.Error()
		c.render(w, http.StatusBadRequest, "explain", "Explain", d)
		return
	}
	if !d.Available {
		d.Error = "explain is not available in this control plane"
		c.render(w, http.StatusNotImplemented, "explain", "Explain", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	v, err := c.src.Explain(ctx, raw.ProxyID, raw.Type, raw.Name)
	if err == nil {
		d.Result, err = renderJSON(v)
	}
	if err != nil {
		d.Error = clientlog.Truncate(fmt.Sprintf("explain %s %q for proxy %q: %v", d.Type, d.Name, d.ProxyID, err), clientlog.MaxMessage)
		c.log.Info("console explain failed", clientlog.String("proxy", raw.ProxyID), clientlog.String("type", raw.Type),
			clientlog.String("name", raw.Name), clientlog.Error("error", err))
		c.render(w, http.StatusUnprocessableEntity, "explain", "Explain", d)
		return
	}
	c.render(w, http.StatusOK, "explain", "Explain", d)
}

// validateExplain checks the form's fields, naming the one at fault.
func validateExplain(proxyID, typ, name string) error {
	switch {
	case proxyID == "":
		return errors.New("field proxy: required (a node ID or connection ID)")
	case len(proxyID) > clientlog.MaxValue:
		return fmt.Errorf("field proxy: %d bytes, at most %d", len(proxyID), clientlog.MaxValue)
	case typ == "":
		return errors.New("field type: required (cds, eds, lds, rds or sds)")
	case len(typ) > maxTypeLen:
		return fmt.Errorf("field type: %d bytes, at most %d", len(typ), maxTypeLen)
	case len(name) > maxNameLen:
		return fmt.Errorf("field name: %d bytes, at most %d", len(name), maxNameLen)
	}
	return nil
}

// previewData is the preview page.
type previewData struct {
	Available     bool
	YAML          string
	Submitted     bool
	Result, Error string
}

func (c *Console) previewForm(w http.ResponseWriter, _ *http.Request) {
	c.render(w, http.StatusOK, "preview", "Preview", previewData{Available: c.src.Preview != nil})
}

func (c *Console) preview(w http.ResponseWriter, r *http.Request) {
	d := previewData{Available: c.src.Preview != nil, Submitted: true}
	r.Body = http.MaxBytesReader(w, r.Body, MaxPreviewBytes+4096) // room for the form encoding
	if err := r.ParseForm(); err != nil {
		d.Error = fmt.Sprintf("reading the form: %v", err)
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		c.render(w, code, "preview", "Preview", d)
		return
	}
	yaml := r.PostForm.Get("yaml")
	d.YAML = yaml
	switch {
	case len(yaml) > MaxPreviewBytes:
		d.YAML, d.Error = "", fmt.Sprintf("field yaml: %d bytes, at most %d", len(yaml), MaxPreviewBytes)
		c.render(w, http.StatusRequestEntityTooLarge, "preview", "Preview", d)
		return
	case strings.TrimSpace(yaml) == "":
		d.Error = "field yaml: required (one or more Istio config documents)"
		c.render(w, http.StatusBadRequest, "preview", "Preview", d)
		return
	case !d.Available:
		d.Error = "preview is not available in this control plane"
		c.render(w, http.StatusNotImplemented, "preview", "Preview", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	v, err := c.src.Preview(ctx, []byte(yaml))
	if err == nil {
		d.Result, err = renderJSON(v)
	}
	if err != nil {
		d.Error = clientlog.Truncate("preview: "+err.Error(), clientlog.MaxMessage)
		c.log.Info("console preview failed", "bytes", len(yaml), clientlog.Error("error", err))
		c.render(w, http.StatusUnprocessableEntity, "preview", "Preview", d)
		return
	}
	c.render(w, http.StatusOK, "preview", "Preview", d)
}

// renderJSON formats an answer: proto messages redacted (no key material)
// and as protojson, anything else as encoding/json; cut to MaxResultBytes.
func renderJSON(v any) (string, error) {
	var out []byte
	var err error
	if m, ok := v.(proto.Message); ok {
		out, err = protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(redact.Copy(m))
	} else {
		out, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return "", fmt.Errorf("formatting the answer as JSON: %w", err)
	}
	if len(out) > MaxResultBytes {
		return clientlog.Truncate(string(out), MaxResultBytes) + "\n(cut at " + strconv.Itoa(MaxResultBytes) + " bytes)", nil
	}
	return string(out), nil
}
