package file

import (
	"bytes"
	"errors"
	"fmt"

	yaml3 "go.yaml.in/yaml/v3"
)

// YAML aliases (*name) repeat the node an anchor (&name) marks, so a small
// document can stand for an enormous one (a "billion laughs"). The YAML
// decoder behind sigs.k8s.io/yaml (go.yaml.in/yaml/v2) caps how many nodes
// aliases may add, but not their size, and it materialises the expansion
// before that cap trips. checkAliases measures the expansion first, without
// expanding, and refuses documents that grow past aliasLimit.
//
// Size here is the number of nodes plus the bytes of their scalar values,
// with every alias replaced by the node it names.

// A document may expand to aliasFactor times its size, and to minAliasLimit
// however small it is. Expanded size costs the decoder about 25 bytes of
// allocation per unit, so this keeps an aliased document within the cost of
// dense YAML without aliases (about 130 bytes per byte), and a file of many
// small documents cannot multiply its cost by the floor.
const (
	aliasFactor   = 8
	minAliasLimit = 4 << 10
)

// aliasLimit is the largest expanded size of a document of n bytes.
func aliasLimit(n int) uint64 { return max(aliasFactor*uint64(n), minAliasLimit) }

// errAliasExpansion marks documents whose aliases expand past aliasLimit.
var errAliasExpansion = errors.New("YAML aliases expand the document too far")

// checkAliases returns an error when the aliases of doc, which starts at line
// firstLine of its file, expand it past aliasLimit. A document without
// aliases costs one pass over its bytes; one whose aliases the lower-bound
// scan already proves too large is refused without being parsed; any other
// document with aliases is parsed once into a tree that keeps aliases as
// references, and measured exactly.
func checkAliases(doc []byte, firstLine int) *fieldError {
	if !mayHaveAliases(doc) {
		return nil
	}
	limit := aliasLimit(len(doc))
	if lb := aliasLowerBound(doc, limit); lb > limit {
		return expansionError(len(doc), limit)
	}
	size, err := expandedSize(doc, limit)
	if err != nil {
		// The aliases cannot be measured: refuse rather than expand blindly.
		msg := "invalid YAML: " + fileLines(oneLine(err.Error()), firstLine)
		return &fieldError{err: &cleanError{msg: msg, err: err}}
	}
	if size > limit {
		return expansionError(len(doc), limit)
	}
	return nil
}

func expansionError(docSize int, limit uint64) *fieldError {
	return &fieldError{err: fmt.Errorf("%w: its %d bytes expand to more than %d (the limit is %d times a document's size, at least %d)",
		errAliasExpansion, docSize, limit, aliasFactor, minAliasLimit)}
}

// mayHaveAliases reports whether doc could contain an alias: an anchor
// sign somewhere and a '*' followed by a character of an anchor name.
func mayHaveAliases(doc []byte) bool {
	if bytes.IndexByte(doc, '&') < 0 {
		return false
	}
	for rest := doc; ; {
		i := bytes.IndexByte(rest, '*')
		if i < 0 || i+1 >= len(rest) {
			return false
		}
		if isAnchorChar(rest[i+1]) {
			return true
		}
		rest = rest[i+1:]
	}
}

// isAnchorChar reports whether c may appear in an anchor or alias name, as
// the YAML decoder reads them.
func isAnchorChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-'
}

// expandedSize parses doc into nodes that keep aliases as references and
// returns the size of its expansion, counting each anchored node once and
// stopping early past limit. An alias inside its own anchor adds nothing
// (the decoder rejects it later).
func expandedSize(doc []byte, limit uint64) (uint64, error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(doc, &root); err != nil {
		return 0, err
	}
	memo := map[*yaml3.Node]uint64{}
	active := map[*yaml3.Node]bool{}
	var size func(n *yaml3.Node) uint64
	size = func(n *yaml3.Node) uint64 {
		if n == nil {
			return 0
		}
		if n.Kind == yaml3.AliasNode {
			if active[n.Alias] {
				return 0
			}
			return size(n.Alias)
		}
		if s, ok := memo[n]; ok {
			return s
		}
		active[n] = true
		s := 1 + uint64(len(n.Value))
		for _, c := range n.Content {
			if s = addCapped(s, size(c)); s > limit {
				break
			}
		}
		delete(active, n)
		if n.Anchor != "" {
			memo[n] = s
		}
		return s
	}
	return size(&root), nil
}

// addCapped adds without wrapping around.
func addCapped(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}
