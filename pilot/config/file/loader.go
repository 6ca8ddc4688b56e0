// Package file reads Istio configuration and Kubernetes service objects from
// a directory of YAML manifests, keeping the last good version of every
// object when a document turns bad, and watches the directory for changes.
package file

import (
	"bytes"
	"cmp"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/support"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
	"github.com/meshpilot/meshpilot/serviceregistry/kube"
)

// Snapshot is the content of a directory at one read.
type Snapshot struct {
	// Configs are the Istio objects, sorted by kind, namespace and name.
	Configs []model.Config
	// Kube holds the Kubernetes objects, each list sorted by namespace and name.
	Kube kube.Objects
	// Secrets are the v1 Secrets (gateway credentials), sorted by namespace
	// and name, with stringData merged into data.
	Secrets []*corev1.Secret
	// Errors lists everything wrong in this read, sorted by file and index.
	Errors []*DocError
	// Files is the number of files read.
	Files int
	// Ignored counts documents of kinds this source does not consume
	// (Deployment, ServiceAccount, ...).
	Ignored int
	// UnsupportedFields counts the fields set in Configs that meshpilot
	// does not (or only partly) carry out (support.Check), for the gauge
	// meshpilot_config_unsupported_fields.
	UnsupportedFields int
}

// Loader reads a directory and remembers the last good objects between reads.
// Objects it returns are shared between snapshots and must not be modified.
type Loader struct {
	dir string
	log *slog.Logger
	// validator checks Istio objects as a cluster would.
	validator *validation.Validator

	mu   sync.Mutex
	last *index
	// logged holds the text of the errors already logged.
	logged map[string]bool
	// unsupported logs the unsupported fields of each object version once.
	unsupported *support.Reporter
}

// NewLoader returns a Loader of dir. A nil log discards logs.
func NewLoader(dir string, log *slog.Logger) *Loader {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Loader{dir: dir, log: log, validator: validation.New(validation.Options{}), last: newIndex(), unsupported: support.NewReporter(log, nil)}
}

// Dir returns the directory the loader reads.
func (l *Loader) Dir() string { return l.dir }

// docRef names a document: a file relative to the directory and an index.
type docRef struct {
	file  string
	index int
}

type objKey struct {
	kind, namespace, name string
}

// index holds the objects of one read, findable the ways a later read needs.
type index struct {
	byKey  map[objKey]*object
	byDoc  map[docRef]*object
	byFile map[string][]*object
	byHash map[string]*object
	// source of each object in this read.
	source map[*object]docRef
}

func newIndex() *index {
	return &index{
		byKey:  map[objKey]*object{},
		byDoc:  map[docRef]*object{},
		byFile: map[string][]*object{},
		byHash: map[string]*object{},
		source: map[*object]docRef{},
	}
}

func (o *object) key() objKey { return objKey{o.kind, o.namespace, o.name} }

// Load reads every *.yaml and *.yml file under the directory, skipping
// hidden files and directories. It fails only when the directory itself
// cannot be read; problems with files and documents are in Snapshot.Errors,
// and the objects they defined at the last good read stay in the snapshot.
func (l *Loader) Load() (*Snapshot, error) {
	files, fileErrs, err := listFiles(l.dir)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &read{prev: l.last, cur: newIndex(), snap: &Snapshot{Errors: fileErrs}, validator: l.validator}
	for _, e := range fileErrs {
		r.retainUnder(e.File)
	}
	for _, f := range files {
		r.file(l.dir, f)
	}
	l.last = r.cur
	snap := r.finish()
	l.logErrors(snap.Errors)
	snap.UnsupportedFields = l.reportUnsupported(snap.Configs)
	l.log.Debug("config directory loaded", "dir", l.dir, "files", snap.Files, "configs", len(snap.Configs),
		"services", len(snap.Kube.Services), "pods", len(snap.Kube.Pods), "secrets", len(snap.Secrets), "ignored", snap.Ignored, "errors", len(snap.Errors))
	return snap, nil
}

// logErrors logs each error once, as one warning, when it first appears,
// and notes at info level the errors of the previous read that are gone.
func (l *Loader) logErrors(errs []*DocError) {
	seen := make(map[string]bool, len(errs))
	for _, e := range errs {
		text := e.Error()
		if seen[text] {
			continue
		}
		seen[text] = true
		if l.logged[text] {
			continue
		}
		l.log.Warn("invalid config document", "file", e.File, "index", e.Index, "kind", e.Kind,
			"namespace", e.Namespace, "name", e.Name, "field", e.Field, "error", e.Err)
	}
	var resolved []string
	for text := range l.logged {
		if !seen[text] {
			resolved = append(resolved, text)
		}
	}
	slices.Sort(resolved)
	for _, text := range resolved {
		l.log.Info("config error resolved", "error", text)
	}
	l.logged = seen
}

// reportUnsupported logs, once per object version (its content hash), the
// fields of configs meshpilot does not carry out, and returns their count.
func (l *Loader) reportUnsupported(configs []model.Config) int {
	objs := make([]support.Object, len(configs))
	for i, c := range configs {
		objs[i] = support.Object{Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name,
			Version: c.ResourceVersion, Source: c.Source, Spec: c.Spec}
	}
	return l.unsupported.Replace(objs)
}

// read is the state of one Load.
type read struct {
	prev, cur *index
	snap      *Snapshot
	validator *validation.Validator
}

func (r *read) file(dir, rel string) {
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		r.snap.Errors = append(r.snap.Errors, &DocError{File: rel, Index: -1, Err: fmt.Errorf("read: %w", err)})
		for _, o := range r.prev.byFile[rel] {
			r.add(o, r.prev.source[o], true)
		}
		return
	}
	r.snap.Files++
	line := 1
	for i, doc := range splitDocuments(data) {
		r.doc(docRef{rel, i}, doc, line)
		line += bytes.Count(doc, []byte("\n")) + 1
	}
}

// doc reads one document; line is where it starts in its file.
func (r *read) doc(ref docRef, doc []byte, line int) {
	hash := contentHash(doc)
	if o := r.prev.byHash[hash]; o != nil {
		r.add(r.reuse(o, ref), ref, false)
		return
	}
	p := parseDoc(doc, line, r.validator)
	switch {
	case p.empty:
		return
	case p.ignored:
		r.snap.Ignored++
		return
	case len(p.errs) > 0:
		if p.hdr.namespace == "" && p.hdr.name != "" && p.hdr.kind != "" && p.hdr.kind != "Node" {
			p.hdr.namespace = defaultNS
		}
		for _, fe := range p.errs {
			r.snap.Errors = append(r.snap.Errors, &DocError{File: ref.file, Index: ref.index, Kind: p.hdr.kind,
				Namespace: p.hdr.namespace, Name: p.hdr.name, Field: fe.field, Err: fe.err})
		}
		if old := r.lastGood(ref, p.hdr); old != nil {
			r.add(old, ref, true)
		}
		return
	}
	o := p.obj
	o.hash = hash
	if o.config != nil {
		o.config.ResourceVersion = hash
		o.config.Source = fmt.Sprintf("%s#%d", ref.file, ref.index)
		o.config.Generation = 1
		if old := r.prev.byKey[o.key()]; old != nil && old.config != nil {
			o.config.Generation = old.config.Generation + 1
		}
	}
	r.add(o, ref, false)
}

// retainUnder keeps the previous objects of every file under dir, a
// directory that could not be read.
func (r *read) retainUnder(dir string) {
	var files []string
	for f := range r.prev.byFile {
		if strings.HasPrefix(f, dir+"/") {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	for _, f := range files {
		for _, o := range r.prev.byFile[f] {
			r.add(o, r.prev.source[o], true)
		}
	}
}

// reuse returns the previous object o parsed from identical content, with
// its Source updated when the document moved.
func (r *read) reuse(o *object, ref docRef) *object {
	if o.config == nil || r.prev.source[o] == ref {
		return o
	}
	c := *o.config
	c.Source = fmt.Sprintf("%s#%d", ref.file, ref.index)
	moved := *o
	moved.config = &c
	return &moved
}

// lastGood finds what a failing document defined at the previous read: the
// object of the same kind, namespace and name when the document still names
// one, else the object of the same file and index.
func (r *read) lastGood(ref docRef, h header) *object {
	if h.kind != "" && h.name != "" {
		if o := r.prev.byKey[objKey{h.kind, h.namespace, h.name}]; o != nil {
			return o
		}
	}
	return r.prev.byDoc[ref]
}

// add puts o into the read unless an earlier document defined the same
// object; retained marks a last good object standing in for a bad document.
func (r *read) add(o *object, ref docRef, retained bool) {
	k := o.key()
	if first, dup := r.cur.byKey[k]; dup {
		if !retained && first != o {
			src := r.cur.source[first]
			r.snap.Errors = append(r.snap.Errors, &DocError{File: ref.file, Index: ref.index, Kind: o.kind,
				Namespace: o.namespace, Name: o.name,
				Err: fmt.Errorf("duplicate %s %s/%s: already defined in %s#%d", o.kind, o.namespace, o.name, src.file, src.index)})
		}
		return
	}
	r.cur.byKey[k] = o
	r.cur.byDoc[ref] = o
	r.cur.byFile[ref.file] = append(r.cur.byFile[ref.file], o)
	r.cur.source[o] = ref
	if o.hash != "" {
		r.cur.byHash[o.hash] = o
	}
}

// finish assembles the snapshot from the objects of the read.
func (r *read) finish() *Snapshot {
	s := r.snap
	for _, o := range r.cur.byKey {
		if o.config != nil {
			s.Configs = append(s.Configs, *o.config)
			continue
		}
		switch obj := o.kube.(type) {
		case *corev1.Service:
			s.Kube.Services = append(s.Kube.Services, obj)
		case *corev1.Endpoints:
			s.Kube.Endpoints = append(s.Kube.Endpoints, obj)
		case *corev1.Pod:
			s.Kube.Pods = append(s.Kube.Pods, obj)
		case *corev1.Node:
			s.Kube.Nodes = append(s.Kube.Nodes, obj)
		case *corev1.Secret:
			s.Secrets = append(s.Secrets, obj)
		case *discoveryv1.EndpointSlice:
			s.Kube.EndpointSlices = append(s.Kube.EndpointSlices, obj)
		}
	}
	slices.SortFunc(s.Configs, func(a, b model.Config) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	sortKube(s.Kube.Services)
	sortKube(s.Kube.Endpoints)
	sortKube(s.Kube.Pods)
	sortKube(s.Kube.Nodes)
	sortKube(s.Kube.EndpointSlices)
	sortKube(s.Secrets)
	slices.SortStableFunc(s.Errors, func(a, b *DocError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Index, b.Index))
	})
	return s
}

type namespacedName interface {
	GetNamespace() string
	GetName() string
}

func sortKube[T namespacedName](objs []T) {
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
}

// listFiles returns the YAML files under dir as sorted slash-separated
// relative paths. Unreadable subdirectories become DocErrors; only an
// unreadable dir is an error.
func listFiles(dir string) ([]string, []*DocError, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("config directory %s: %w", dir, err)
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("config directory %s: not a directory", dir)
	}
	if _, err := os.ReadDir(dir); err != nil {
		return nil, nil, fmt.Errorf("config directory %s: %w", dir, err)
	}
	root := dir
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		root = resolved
	}
	var files []string
	var errs []*DocError
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		rel, relErr := filepath.Rel(root, path)
		if relErr != nil {
			return relErr
		}
		rel = filepath.ToSlash(rel)
		if d == nil {
			errs = append(errs, &DocError{File: rel, Index: -1, Err: fmt.Errorf("read: %w", err)})
			return nil
		}
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if err != nil {
			errs = append(errs, &DocError{File: rel, Index: -1, Err: fmt.Errorf("read directory: %w", err)})
			return nil
		}
		if d.IsDir() || !isYAML(d.Name()) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// Follow links to files (ConfigMap volumes link every key).
			if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		files = append(files, rel)
		return nil
	})
	if walkErr != nil {
		return nil, nil, fmt.Errorf("config directory %s: %w", dir, walkErr)
	}
	slices.Sort(files)
	return files, errs, nil
}

func isYAML(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}
