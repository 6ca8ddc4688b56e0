// Package file reads Istio configuration and Kubernetes service objects from
// a directory of YAML manifests, keeping the last good version of every
// object when a document turns bad, and watches the directory for changes.
//
// An object leaves only when its file is deleted or reads cleanly without
// it: a file that is empty, too large, unreadable, or has any document in
// error keeps the objects it defined at the last good read. When two
// documents define the same object (kind, namespace and name), the one in
// the file that served it at the previous read keeps it; at the first read,
// or when that file no longer defines it, the document whose file path
// sorts first (then the earlier document of the file) wins. The other is
// reported as a duplicate.
//
// Documents of kinds the loader does not read (Deployment, ...) are
// recognised by their top-level apiVersion and kind lines and not decoded
// further. A kind of an Istio API group (*.istio.io) the loader does not
// know is an error. Files are read up to Options.MaxFileSize, and a
// document whose YAML aliases would expand it past 8 times its size (at
// least 4 KiB) is refused before it is expanded.
package file

import (
	"cmp"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
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
	// GatewayAPI holds the Kubernetes Gateway API objects (its lookups
	// unset), each list sorted by namespace and name; the server
	// translates them (pilot/config/gateway).
	GatewayAPI gateway.Input
	// Errors lists everything wrong in this read, sorted by file and index.
	Errors []*DocError
	// Files is the number of files read.
	Files int
	// Ignored counts documents of kinds this source does not consume
	// (Deployment, ServiceAccount, ...).
	Ignored int
	// Decoded counts the documents decoded in this read; the others were
	// unchanged since the previous read, whose outcome is reused.
	Decoded int
	// Replayed counts the files of Files not read again: their identity
	// (device, inode, size, modification and change times) was that of the
	// previous clean read, made more than two seconds after their last
	// change, so its outcome is reused.
	Replayed int
	// UnsupportedFields counts the fields set in Configs that meshpilot
	// does not (or only partly) carry out (support.Check), for the gauge
	// meshpilot_config_unsupported_fields.
	UnsupportedFields int
	// ChangedAt is when the Watcher saw the first change of the burst this
	// read follows; zero for the initial read and for Loader.Load.
	ChangedAt time.Time
}

// DefaultMaxFileSize is the largest file a Loader reads unless its Options
// say otherwise.
const DefaultMaxFileSize = 10 << 20

// Options tune a Loader; the zero value means the defaults.
type Options struct {
	// MaxFileSize is the size in bytes of the largest file read (0 means
	// DefaultMaxFileSize). A larger file is an error, and the objects it
	// defined at the last good read stay.
	MaxFileSize int64
	// Validator checks Istio objects as a cluster would; nil makes one.
	// Loaders may share one (it compiles each kind's CRD once).
	Validator *validation.Validator
}

// Loader reads a directory and remembers the last good objects between reads.
// Objects it returns are shared between snapshots and must not be modified.
type Loader struct {
	dir  string
	log  *slog.Logger
	opts Options

	mu   sync.Mutex
	last *index
	// logged holds the text of the errors already logged.
	logged map[string]bool
	// unsupported logs the unsupported fields of each object version once.
	unsupported *support.Reporter
}

// NewLoader returns a Loader of dir with the default Options. A nil log
// discards logs.
func NewLoader(dir string, log *slog.Logger) *Loader {
	return NewLoaderWithOptions(dir, log, Options{})
}

// NewLoaderWithOptions returns a Loader of dir. A nil log discards logs.
func NewLoaderWithOptions(dir string, log *slog.Logger, opts Options) *Loader {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.Validator == nil {
		opts.Validator = validation.New(validation.Options{})
	}
	return &Loader{dir: dir, log: log, opts: opts, last: newIndex(), unsupported: support.NewReporter(log, nil)}
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

// outcomeKey identifies a document's content and where its file puts it
// (its errors name lines of the file).
type outcomeKey struct {
	hash string
	line int
}

// index holds the objects of one read, findable the ways a later read needs.
type index struct {
	byKey  map[objKey]*object
	byFile map[string][]*object
	// byHash holds every object decoded or kept in the read, winner of its
	// key or not, by the hash of its document.
	byHash map[string]*object
	// source of each object served by this read.
	source map[*object]docRef
	// outcomes holds the documents that gave no object (empty, ignored or
	// in error), so an unchanged one is not decoded again.
	outcomes map[outcomeKey]parsed
	// files holds the clean reads of this load, by file, to replay at the
	// next load when the file's identity is unchanged.
	files map[string]*fileRead
	// sorted holds the served objects of Istio kinds (config set) sorted
	// by kind, namespace and name.
	sorted []*object
}

// fileRead is what a clean read of one file (no error, nothing retained)
// gave, enough to replay it without reading the file again.
type fileRead struct {
	id fileID
	// trusted is false when the read was racy: the file is read again.
	trusted  bool
	cands    []candidate
	outcomes []outcomeEntry
	ignored  int
}

type outcomeEntry struct {
	key outcomeKey
	p   parsed
}

func newIndex() *index { return newIndexLike(&index{}) }

// newIndexLike returns an empty index with room for as many entries as
// prev has: a reload mostly holds the same objects.
func newIndexLike(prev *index) *index {
	return &index{
		byKey:    make(map[objKey]*object, len(prev.byKey)),
		byFile:   make(map[string][]*object, len(prev.byFile)),
		byHash:   make(map[string]*object, len(prev.byHash)),
		source:   make(map[*object]docRef, len(prev.source)),
		outcomes: make(map[outcomeKey]parsed, len(prev.outcomes)),
		files:    make(map[string]*fileRead, len(prev.files)),
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
	r := &read{maxFileSize: l.opts.MaxFileSize, validator: l.opts.Validator, prev: l.last, cur: newIndexLike(l.last), snap: &Snapshot{Errors: fileErrs}, now: time.Now(),
		cands: make([]candidate, 0, len(l.last.byHash))}
	for _, e := range fileErrs {
		r.retainUnder(e.File)
	}
	for _, f := range files {
		r.file(l.dir, f)
	}
	r.resolve()
	l.last = r.cur
	snap := r.finish()
	l.logErrors(snap.Errors)
	snap.UnsupportedFields = l.reportUnsupported(r.prev, r.cur)
	l.log.Debug("config directory loaded", "dir", l.dir, "files", snap.Files, "configs", len(snap.Configs),
		"services", len(snap.Kube.Services), "pods", len(snap.Kube.Pods), "secrets", len(snap.Secrets),
		"ignored", snap.Ignored, "decoded", snap.Decoded, "replayed", snap.Replayed, "errors", len(snap.Errors))
	return snap, nil
}

// Bounds of the document-supplied strings in logs.
const (
	maxLoggedValue = 256
	maxLoggedError = 1024
)

// logErrors logs each error once, as one warning, when it first appears,
// and notes at info level the errors of the previous read that are gone.
// Strings from documents are clipped.
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
		errText := ""
		if e.Err != nil {
			errText = e.Err.Error()
		}
		l.log.Warn("invalid config document", "file", clip(e.File, maxLoggedValue), "index", e.Index,
			"kind", clip(e.Kind, maxLoggedValue), "namespace", clip(e.Namespace, maxLoggedValue),
			"name", clip(e.Name, maxLoggedValue), "field", clip(e.Field, maxLoggedValue), "error", clip(errText, maxLoggedError))
	}
	var resolved []string
	for text := range l.logged {
		if !seen[text] {
			resolved = append(resolved, text)
		}
	}
	slices.Sort(resolved)
	for _, text := range resolved {
		l.log.Info("config error resolved", "error", clip(text, maxLoggedError))
	}
	l.logged = seen
}

// reportUnsupported logs, once per object version (its content hash), the
// fields of the configs served by cur that meshpilot does not carry out,
// and returns their count. Only the configs that are not the very objects
// prev served are checked, and those prev served and cur does not are
// forgotten: the reporter holds the others already.
func (l *Loader) reportUnsupported(prev, cur *index) int {
	for k, o := range cur.byKey {
		if o.config == nil || prev.byKey[k] == o {
			continue
		}
		c := o.config
		l.unsupported.Accept(support.Object{Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name,
			Version: c.ResourceVersion, Source: c.Source, Spec: c.Spec})
	}
	for k, o := range prev.byKey {
		if o.config == nil {
			continue
		}
		if now := cur.byKey[k]; now == nil || now.config == nil {
			l.unsupported.Remove(k.kind, k.namespace, k.name)
		}
	}
	return l.unsupported.Total()
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
