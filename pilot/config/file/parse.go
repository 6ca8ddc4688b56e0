package file

import (
	"bytes"
	"fmt"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// Parse decodes and validates the YAML documents of data, named name in
// errors, exactly as the loader checks the documents of a config file: the
// same decoding, alias limits and validator. It returns the Istio config
// objects of the documents that passed and one DocError per problem.
// Documents of Kubernetes kinds (Service, Secret, ...) are not config
// objects: each is reported as a DocError, as are documents the loader
// would ignore. Nothing is applied anywhere.
func Parse(name string, data []byte, v *validation.Validator) ([]model.Config, []*DocError) {
	var (
		configs []model.Config
		errs    []*DocError
	)
	line := 1
	for i, doc := range splitDocuments(data) {
		p := parseDoc(doc, line, v)
		line += bytes.Count(doc, []byte("\n")) + 1
		h := p.hdr
		if h.namespace == "" && h.name != "" && h.kind != "" {
			h.namespace = defaultNS
		}
		docErr := func(field string, err error) *DocError {
			return &DocError{File: name, Index: i, Kind: clip(h.kind, maxHeaderValue),
				Namespace: clip(h.namespace, maxHeaderValue), Name: clip(h.name, maxHeaderValue), Field: field, Err: err}
		}
		switch {
		case p.empty:
		case len(p.errs) > 0:
			for _, fe := range p.errs {
				errs = append(errs, docErr(fe.field, fe.err))
			}
		case p.ignored || p.obj == nil || p.obj.config == nil:
			errs = append(errs, docErr("kind", fmt.Errorf("%s %s is not an Istio config kind", clip(h.apiVersion, maxHeaderValue), clip(h.kind, maxHeaderValue))))
		default:
			cfg := *p.obj.config
			cfg.ResourceVersion = contentHash(doc)
			cfg.Source = fmt.Sprintf("%s#%d", name, i)
			configs = append(configs, cfg)
		}
	}
	return configs, errs
}
