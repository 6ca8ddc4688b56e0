package file

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/config/validation"
)

// read is the state of one Load. Files add candidates, objects that want to
// be served; resolve then picks one per key and reports the others.
type read struct {
	maxFileSize int64
	validator   *validation.Validator
	prev, cur   *index
	snap        *Snapshot
	cands       []candidate
	// outcomes collects the outcomes the current file's documents stored.
	outcomes []outcomeEntry
	// now is when the load started, to tell racy reads.
	now time.Time
}

// candidate is an object a document defines, or, retained, the last good
// version of an object its file defined and now fails to.
type candidate struct {
	obj      *object
	ref      docRef
	retained bool
}

// outcome is what one document gave.
type outcome int

const (
	outcomeEmpty outcome = iota
	outcomeIgnored
	outcomeFailed
	outcomeObject
)

// file reads one file. When the file cannot be read, is empty or has a
// document in error, the objects it defined at the previous read stay,
// except those its good documents define anew.
func (r *read) file(dir, rel string) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	if r.replay(path, rel) {
		return
	}
	data, info, err := readFile(path, r.maxFileSize)
	if err != nil {
		n := r.retainFile(rel, nil)
		r.snap.Errors = append(r.snap.Errors, &DocError{File: rel, Index: -1, Err: fmt.Errorf("%w%s", err, keeping(n))})
		return
	}
	r.snap.Files++
	errs, cands, ignored := len(r.snap.Errors), len(r.cands), r.snap.Ignored
	r.outcomes = r.outcomes[:0]
	defer func() { r.record(rel, info, errs, cands, ignored) }()
	defined := map[objKey]bool{}
	failed, content := false, false
	line := 1
	for i, doc := range splitDocuments(data) {
		switch out, key := r.doc(docRef{rel, i}, doc, line); out {
		case outcomeObject:
			defined[key] = true
			content = true
		case outcomeFailed:
			failed, content = true, true
		case outcomeIgnored:
			content = true
		}
		line += bytes.Count(doc, []byte("\n")) + 1
	}
	switch {
	case !content:
		n := r.retainFile(rel, nil)
		if n == 0 {
			return
		}
		what := "file is empty"
		if len(bytes.TrimSpace(data)) > 0 {
			// A stream of no documents: comments, separators, nulls.
			what = "file has no YAML documents, only comments or separators"
		}
		r.snap.Errors = append(r.snap.Errors, &DocError{File: rel, Index: -1, Err: fmt.Errorf("%s%s", what, keeping(n))})
	case failed:
		r.retainFile(rel, defined)
	}
}

// keeping says how many last good objects a file in error keeps.
func keeping(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "; keeping the 1 object it defined"
	}
	return fmt.Sprintf("; keeping the %d objects it defined", n)
}

// readFile reads a file of at most limit bytes. It returns the file's
// information as of before the read, so a change during the read shows
// at the next stat.
func readFile(path string, limit int64) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	if st.Size() > limit {
		return nil, nil, fmt.Errorf("file is %d bytes, over the %d-byte limit", st.Size(), limit)
	}
	// Room for the whole file and a read that finds its end.
	buf := bytes.NewBuffer(make([]byte, 0, st.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	if int64(buf.Len()) > limit {
		return nil, nil, fmt.Errorf("file grew past the %d-byte limit while being read", limit)
	}
	return buf.Bytes(), st, nil
}

// replay offers again what the previous read of rel gave when that read was
// clean and trusted and the file's identity (through symlinks) is the same,
// and reports whether it did. The file is then not read.
func (r *read) replay(path, rel string) bool {
	prev := r.prev.files[rel]
	if prev == nil || !prev.trusted {
		return false
	}
	info, err := os.Stat(path)
	if err != nil {
		return false
	}
	if id, ok := identify(info, r.now); !ok || id != prev.id {
		return false
	}
	r.snap.Files++
	r.snap.Replayed++
	r.snap.Ignored += prev.ignored
	for _, c := range prev.cands {
		r.candidate(c.obj, c.ref, false)
	}
	for _, e := range prev.outcomes {
		r.cur.outcomes[e.key] = e.p
	}
	r.cur.files[rel] = prev
	return true
}

// record keeps the read of rel for replay when it was clean: it added no
// error and retained no object (errs and cands are the lengths of the
// snapshot's errors and of the candidates before the file, ignored the
// ignored count).
func (r *read) record(rel string, info fs.FileInfo, errs, cands, ignored int) {
	if len(r.snap.Errors) != errs {
		return
	}
	added := r.cands[cands:]
	for _, c := range added {
		if c.retained {
			return
		}
	}
	id, trusted := identify(info, r.now)
	r.cur.files[rel] = &fileRead{id: id, trusted: trusted, cands: slices.Clone(added),
		outcomes: slices.Clone(r.outcomes), ignored: r.snap.Ignored - ignored}
}

// doc reads one document; line is where it starts in its file. Unchanged
// content reuses the previous read's object or outcome.
func (r *read) doc(ref docRef, doc []byte, line int) (outcome, objKey) {
	hash := contentHash(doc)
	if o := r.prev.byHash[hash]; o != nil {
		o = r.reuse(o, ref)
		r.candidate(o, ref, false)
		return outcomeObject, o.key()
	}
	ok := outcomeKey{hash, line}
	p, seen := r.prev.outcomes[ok]
	if !seen {
		p = parseDoc(doc, line, r.validator)
		r.snap.Decoded++
	}
	switch {
	case p.empty:
		r.cur.outcomes[ok] = p
		r.outcomes = append(r.outcomes, outcomeEntry{ok, p})
		return outcomeEmpty, objKey{}
	case p.ignored:
		r.cur.outcomes[ok] = p
		r.outcomes = append(r.outcomes, outcomeEntry{ok, p})
		r.snap.Ignored++
		return outcomeIgnored, objKey{}
	case len(p.errs) > 0:
		r.cur.outcomes[ok] = p
		h := p.hdr
		if h.namespace == "" && h.name != "" && h.kind != "" && h.kind != "Node" {
			h.namespace = defaultNS
		}
		for _, fe := range p.errs {
			r.snap.Errors = append(r.snap.Errors, &DocError{File: ref.file, Index: ref.index,
				Kind: clip(h.kind, maxHeaderValue), Namespace: clip(h.namespace, maxHeaderValue), Name: clip(h.name, maxHeaderValue),
				Field: fe.field, Err: fe.err})
		}
		return outcomeFailed, objKey{}
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
	r.candidate(o, ref, false)
	return outcomeObject, o.key()
}

// candidate offers o, from the document ref, to be served.
func (r *read) candidate(o *object, ref docRef, retained bool) {
	r.cands = append(r.cands, candidate{obj: o, ref: ref, retained: retained})
	if o.hash != "" {
		if _, dup := r.cur.byHash[o.hash]; !dup {
			r.cur.byHash[o.hash] = o
		}
	}
}

// retainFile offers again the objects file served at the previous read,
// except those of a key in skip, and returns how many it offered.
func (r *read) retainFile(file string, skip map[objKey]bool) int {
	n := 0
	for _, o := range r.prev.byFile[file] {
		if !skip[o.key()] {
			r.candidate(o, r.prev.source[o], true)
			n++
		}
	}
	return n
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
		r.retainFile(f, nil)
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

// resolve serves one candidate per key and reports the other documents
// defining the key as duplicates of it.
func (r *read) resolve() {
	// first holds each key's first candidate, next chains the others: one
	// map entry a key and no slice for the (usual) single candidate.
	first := make(map[objKey]int32, len(r.prev.byKey))
	next := make([]int32, len(r.cands))
	last := make([]int32, len(r.cands))
	var keys []int32
	for i, c := range r.cands {
		next[i] = -1
		k := c.obj.key()
		f, seen := first[k]
		if !seen {
			first[k] = int32(i)
			last[i] = int32(i)
			keys = append(keys, int32(i))
			continue
		}
		next[last[f]] = int32(i)
		last[f] = int32(i)
	}
	var cands []candidate
	for _, f := range keys {
		w := r.cands[f]
		k := w.obj.key()
		if next[f] < 0 {
			r.serve(k, w)
			continue
		}
		cands = cands[:0]
		for i := f; i >= 0; i = next[i] {
			cands = append(cands, r.cands[i])
		}
		w = slices.MinFunc(cands, r.preferred(k))
		for _, c := range cands {
			if c.retained || c.ref == w.ref {
				continue
			}
			r.snap.Errors = append(r.snap.Errors, &DocError{File: c.ref.file, Index: c.ref.index,
				Kind: clip(k.kind, maxHeaderValue), Namespace: clip(k.namespace, maxHeaderValue), Name: clip(k.name, maxHeaderValue),
				Err: fmt.Errorf("duplicate %s %s/%s: already defined in %s#%d",
					clip(k.kind, maxHeaderValue), clip(k.namespace, maxHeaderValue), clip(k.name, maxHeaderValue), w.ref.file, w.ref.index)})
		}
		r.serve(k, w)
	}
}

// serve makes w the object served for k.
func (r *read) serve(k objKey, w candidate) {
	r.cur.byKey[k] = w.obj
	r.cur.byFile[w.ref.file] = append(r.cur.byFile[w.ref.file], w.obj)
	r.cur.source[w.obj] = w.ref
}

// preferred orders the candidates for key k, the one to serve first: from
// the file that served k at the previous read, a document over a retained
// version, then by file path and position in the file.
func (r *read) preferred(k objKey) func(a, b candidate) int {
	incumbent := ""
	if o := r.prev.byKey[k]; o != nil {
		incumbent = r.prev.source[o].file
	}
	rank := func(c candidate) int {
		n := 0
		if c.ref.file != incumbent {
			n += 2
		}
		if c.retained {
			n++
		}
		return n
	}
	return func(a, b candidate) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.ref.file, b.ref.file), cmp.Compare(a.ref.index, b.ref.index))
	}
}

// finish assembles the snapshot from the objects of the read.
func (r *read) finish() *Snapshot {
	s := r.snap
	// The configs the previous read served are in r.prev.sorted: merge
	// those still served with the new ones, sorted, rather than sort all.
	var fresh []*object
	for k, o := range r.cur.byKey {
		if o.config != nil {
			if r.prev.byKey[k] != o {
				fresh = append(fresh, o)
			}
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
		case *gwv1.GatewayClass:
			s.GatewayAPI.GatewayClasses = append(s.GatewayAPI.GatewayClasses, obj)
		case *gwv1.Gateway:
			s.GatewayAPI.Gateways = append(s.GatewayAPI.Gateways, obj)
		case *gwv1.HTTPRoute:
			s.GatewayAPI.HTTPRoutes = append(s.GatewayAPI.HTTPRoutes, obj)
		case *gwv1.GRPCRoute:
			s.GatewayAPI.GRPCRoutes = append(s.GatewayAPI.GRPCRoutes, obj)
		case *gwv1.TLSRoute:
			s.GatewayAPI.TLSRoutes = append(s.GatewayAPI.TLSRoutes, obj)
		case *gwv1.TCPRoute:
			s.GatewayAPI.TCPRoutes = append(s.GatewayAPI.TCPRoutes, obj)
		case *gwv1.UDPRoute:
			s.GatewayAPI.UDPRoutes = append(s.GatewayAPI.UDPRoutes, obj)
		case *gwv1.ReferenceGrant:
			s.GatewayAPI.ReferenceGrants = append(s.GatewayAPI.ReferenceGrants, obj)
		case *gwv1.ListenerSet:
			s.GatewayAPI.ListenerSets = append(s.GatewayAPI.ListenerSets, obj)
		}
	}
	slices.SortFunc(fresh, compareObjects)
	sorted := make([]*object, 0, len(r.cur.byKey))
	for _, o := range r.prev.sorted {
		if _, served := r.cur.source[o]; !served {
			continue
		}
		for len(fresh) > 0 && compareObjects(fresh[0], o) < 0 {
			sorted = append(sorted, fresh[0])
			fresh = fresh[1:]
		}
		sorted = append(sorted, o)
	}
	sorted = append(sorted, fresh...)
	r.cur.sorted = sorted
	if len(sorted) > 0 {
		s.Configs = make([]model.Config, len(sorted))
		for i, o := range sorted {
			s.Configs[i] = *o.config
		}
	}
	sortKube(s.Kube.Services)
	sortKube(s.Kube.Endpoints)
	sortKube(s.Kube.Pods)
	sortKube(s.Kube.Nodes)
	sortKube(s.Kube.EndpointSlices)
	sortKube(s.Secrets)
	sortKube(s.GatewayAPI.GatewayClasses)
	sortKube(s.GatewayAPI.Gateways)
	sortKube(s.GatewayAPI.HTTPRoutes)
	sortKube(s.GatewayAPI.GRPCRoutes)
	sortKube(s.GatewayAPI.TLSRoutes)
	sortKube(s.GatewayAPI.TCPRoutes)
	sortKube(s.GatewayAPI.UDPRoutes)
	sortKube(s.GatewayAPI.ReferenceGrants)
	sortKube(s.GatewayAPI.ListenerSets)
	slices.SortStableFunc(s.Errors, func(a, b *DocError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Index, b.Index))
	})
	return s
}

// compareObjects orders objects by kind, namespace and name.
func compareObjects(a, b *object) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}
