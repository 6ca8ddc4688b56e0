// Package inject is the sidecar injection engine: it renders the templates of
// Istio's istio-sidecar-injector ConfigMap for a Pod, merges them into the Pod
// as Istio's injector does and answers admission requests with a JSONPatch.
package inject

import (
	"fmt"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Policy is the injector's default when neither a pod label/annotation nor a
// selector decides.
type Policy string

// Injection policies of the ConfigMap's `policy` field.
const (
	PolicyEnabled  Policy = "enabled"
	PolicyDisabled Policy = "disabled"
)

// SidecarTemplate is the template used when the ConfigMap names none.
const SidecarTemplate = "sidecar"

// Config is the `config` key of the istio-sidecar-injector ConfigMap plus
// its `values` key (the chart values the templates read).
type Config struct {
	Policy               Policy                 `json:"policy"`
	DefaultTemplates     []string               `json:"defaultTemplates"`
	RawTemplates         map[string]string      `json:"templates"`
	Aliases              map[string][]string    `json:"aliases"`
	NeverInjectSelector  []metav1.LabelSelector `json:"neverInjectSelector"`
	AlwaysInjectSelector []metav1.LabelSelector `json:"alwaysInjectSelector"`
	InjectedAnnotations  map[string]string      `json:"injectedAnnotations"`

	// Values is the parsed `values` key, as the templates see it.
	Values map[string]any `json:"-"`
	// Templates are RawTemplates parsed with the injection functions.
	Templates map[string]*template.Template `json:"-"`
}

// ParseConfig parses the ConfigMap's `config` (YAML) and `values` (JSON or
// YAML) keys and compiles every template.
func ParseConfig(config, values string) (*Config, error) {
	c := &Config{}
	if err := yaml.Unmarshal([]byte(config), c); err != nil {
		return nil, fmt.Errorf("istio-sidecar-injector key config: %w", err)
	}
	if c.Policy == "" {
		c.Policy = PolicyEnabled
	}
	if c.Policy != PolicyEnabled && c.Policy != PolicyDisabled {
		return nil, fmt.Errorf("istio-sidecar-injector key config field policy: %q is neither %q nor %q",
			c.Policy, PolicyEnabled, PolicyDisabled)
	}
	if len(c.DefaultTemplates) == 0 {
		c.DefaultTemplates = []string{SidecarTemplate}
	}
	for i, s := range c.NeverInjectSelector {
		if _, err := metav1.LabelSelectorAsSelector(&s); err != nil {
			return nil, fmt.Errorf("istio-sidecar-injector key config field neverInjectSelector[%d]: %w", i, err)
		}
	}
	for i, s := range c.AlwaysInjectSelector {
		if _, err := metav1.LabelSelectorAsSelector(&s); err != nil {
			return nil, fmt.Errorf("istio-sidecar-injector key config field alwaysInjectSelector[%d]: %w", i, err)
		}
	}
	c.Values = map[string]any{}
	if strings.TrimSpace(values) != "" {
		if err := yaml.Unmarshal([]byte(values), &c.Values); err != nil {
			return nil, fmt.Errorf("istio-sidecar-injector key values: %w", err)
		}
	}
	c.Templates = make(map[string]*template.Template, len(c.RawTemplates))
	funcs := templateFuncs()
	for name, text := range c.RawTemplates {
		t, err := template.New(name).Funcs(sprig.TxtFuncMap()).Funcs(funcs).Parse(text)
		if err != nil {
			return nil, fmt.Errorf("istio-sidecar-injector key config field templates.%s: %w", name, err)
		}
		c.Templates[name] = t
	}
	return c, nil
}

// value walks the chart values along path; nil when a step is missing.
func (c *Config) value(path ...string) any {
	var cur any = c.Values
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// stringValue is value as a string ("" when missing).
func (c *Config) stringValue(path ...string) string {
	v := c.value(path...)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// boolValue is value as a bool (false when missing or not a bool).
func (c *Config) boolValue(path ...string) bool {
	b, _ := c.value(path...).(bool)
	return b
}
