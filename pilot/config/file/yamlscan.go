package file

import (
	"bytes"
	"hash/maphash"
)

// aliasLowerBound reads doc once, without parsing it into nodes, and returns
// a lower bound of its expanded size (see aliases.go), stopping as soon as
// the bound passes limit. It counts only what it is sure of: scalars (one
// plus the bytes it is sure they hold), anchored collections (one), and
// aliases at places where a node starts, each worth the count of the
// anchored node it names. It knows an anchored collection's extent only
// when certain: a flow collection, or the lines indented under the key or
// "-" that owns the anchor. Whatever it cannot place (block scalars,
// continuation lines of plain scalars, layouts it does not follow) it skips,
// which can only lower the bound. Its memory is one map entry per anchor
// name and one stack entry per open anchored collection.
func aliasLowerBound(doc []byte, limit uint64) uint64 {
	s := newYAMLScanner(doc, limit)
	s.run()
	return s.total
}

// yamlScanner follows the structure of a YAML document in one pass without
// building nodes: quoted scalars (over several lines), flow collections,
// comments, block scalars and continuation lines of plain scalars, keys and
// sequence entries, anchors and aliases. It measures the lower bound of
// aliasLowerBound, and shows topLevelHeader the lines that start top-level
// keys. Where it cannot follow the document it stops, marked incomplete.
type yamlScanner struct {
	doc   []byte
	limit uint64
	seed  maphash.Seed
	// sizes holds the bound of every anchored node read to its end, by name hash.
	sizes map[uint64]uint64
	// open are the anchored collections being read, innermost last;
	// openNames counts them by name (an alias to one of them is recursive).
	open      []anchoredCollection
	openNames map[uint64]int
	pending   pendingAnchor
	// total is the bound so far; the count of an anchored collection is
	// the growth of total while it is open.
	total uint64

	pos       int
	lineStart int
	flow      int  // depth of flow collections ([ {)
	expect    bool // a node may start at pos
	// ownerCol is the column of the innermost key or "-" or "?" on the
	// current line (-1: none); parentCol is that of the previous line when
	// it ended expecting a nested node. propsCol is the column of the
	// properties (anchor, tag) before the node about to start (-1: none).
	ownerCol, parentCol, propsCol int
	// skipping skips the lines indented more than skipCol: block scalar
	// content and continuation lines of plain scalars.
	skipping bool
	skipCol  int

	// block: a key or entry indicator was seen in block context, so the
	// document's root is a block collection, at column rootCol. Otherwise
	// the first node is the root. The decoder reads nothing after the root.
	block   bool
	rootCol int
	// rootTagged: a tag was read before the root node.
	rootTagged bool

	// topLevel, when set, sees every line that starts at column 0 outside
	// any scalar or flow collection, and the document after it.
	topLevel func(line, rest []byte)
	// incomplete: the scan stopped before the end of the document, or
	// skipped lines it could not place (all the rest of it).
	incomplete bool
}

func newYAMLScanner(doc []byte, limit uint64) *yamlScanner {
	return &yamlScanner{doc: doc, limit: limit, seed: maphash.MakeSeed(), sizes: map[uint64]uint64{},
		openNames: map[uint64]int{}, ownerCol: -1, parentCol: -1, propsCol: -1}
}

// anchoredCollection is an anchored collection whose end is not reached yet.
type anchoredCollection struct {
	name uint64
	// depth is the flow depth inside a flow collection; 0 for a block
	// collection, which ends at a line indented at most col.
	depth, col int
	// total0 is the scanner's total before the collection started.
	total0 uint64
	// counted: the collection itself was counted (a block node is known
	// to be a collection only from its first token).
	counted bool
}

// pendingAnchor is an anchor whose node has not started yet.
type pendingAnchor struct {
	ok   bool
	name uint64
	col  int
	// eol: the anchor ended a line in block context; its node is on the
	// lines indented more than col.
	eol bool
}

func (s *yamlScanner) run() {
	if hasOtherLineBreaks(s.doc) {
		s.incomplete = true // the scan follows lines ended by "\n" only
		return
	}
	if !s.startLine(0) {
		return
	}
	for s.pos < len(s.doc) && s.total <= s.limit {
		c := s.doc[s.pos]
		switch {
		case c == '\n':
			s.endLine()
			if !s.startLine(s.pos + 1) {
				return
			}
		case c == ' ' || c == '\t' || c == '\r':
			s.pos++
		case c == '#':
			// A comment wherever a token may start, even right after "]"
			// (inside plain scalars, plain() reads only " #" as one).
			s.pos = s.eol(s.pos)
		default:
			if !s.token() {
				s.incomplete = true
				return
			}
		}
	}
}

// eol returns the offset of the line break ending the line of p, or len(doc).
func (s *yamlScanner) eol(p int) int {
	if i := bytes.IndexByte(s.doc[p:], '\n'); i >= 0 {
		return p + i
	}
	return len(s.doc)
}

func (s *yamlScanner) col() int { return s.pos - s.lineStart }

// startLine moves to the first line from p that is not blank, a comment or
// skipped, and does the block bookkeeping a new line calls for. It returns
// false at the end of the document.
func (s *yamlScanner) startLine(p int) bool {
	for p < len(s.doc) {
		end := s.eol(p)
		line := s.doc[p:end]
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		rest := bytes.TrimRight(line[indent:], " \t\r")
		switch {
		case len(rest) == 0 || rest[0] == '#':
		case s.flow > 0:
			s.lineStart, s.pos = p, p+indent
			return true
		case indent == 0 && bytes.HasPrefix(rest, []byte("...")) && (len(rest) == 3 || isBlank(rest[3])):
			return false // document end: the decoder reads no further
		case s.skipping && indent > s.skipCol:
		case s.block && indent < s.rootCol:
			s.pos = len(s.doc) // the root collection ended
			return false
		default:
			s.skipping = false
			if !s.blockLine(indent, rest) {
				s.incomplete = true
				s.pos = len(s.doc)
				return false
			}
			s.lineStart, s.pos = p, p+indent
			s.expect, s.ownerCol, s.propsCol = true, -1, -1
			if indent == 0 && s.topLevel != nil {
				s.topLevel(line, s.doc[min(end+1, len(s.doc)):])
			}
			return true
		}
		p = end + 1
	}
	s.pos = len(s.doc)
	return false
}

// blockLine ends the block collections a line indented at indent leaves,
// and starts the node a pending anchor at the end of the previous line
// marks; rest is the line after its indentation. It returns false when the
// scan cannot follow the document from this line.
func (s *yamlScanner) blockLine(indent int, rest []byte) bool {
	for len(s.open) > 0 {
		top := s.open[len(s.open)-1]
		if top.depth != 0 || top.col < indent {
			break
		}
		s.closeTop()
	}
	// An anchor alone on the root's line marks the root, wherever it starts.
	if s.pending.ok && s.pending.eol && s.block {
		switch {
		case indent > s.pending.col:
			s.openAnchor(0, s.pending.col)
		case indent <= s.pending.col && rest[0] == '-' && (len(rest) == 1 || isBlank(rest[1])):
			// A sequence at or left of the anchor: a compact sequence
			// value of an outer key, or the next entry of the anchor's own
			// sequence. The node cannot be placed, and an alias to it in
			// what follows could be counted wrong (fuzzed: "k:\n &p\n- *p"
			// anchors the sequence that holds its own alias). Stop: the
			// bound so far holds, and the exact measure follows it.
			return false
		default:
			s.node(1) // an empty node
		}
	}
	return true
}

// endLine notes, at a line break in block context, what the next line may
// continue.
func (s *yamlScanner) endLine() {
	if s.flow > 0 {
		return
	}
	s.parentCol = -1
	if s.expect {
		s.parentCol = s.ownerCol
		if s.pending.ok {
			s.pending.eol = true
			if s.ownerCol >= 0 {
				s.pending.col = s.ownerCol
			}
		}
	}
}

// token reads the token at pos. It returns false when the scan must stop:
// the document is not YAML the decoder would accept, so nothing more is sure.
func (s *yamlScanner) token() bool {
	c := s.doc[s.pos]
	next := byte(0)
	if s.pos+1 < len(s.doc) {
		next = s.doc[s.pos+1]
	}
	switch {
	case c != '&' && c != '!' && c != '"' && c != '\'' && !s.startsPlain(c, next) && s.propsCol >= 0:
		// Properties apply to the node that follows; an indicator ends them.
		s.propsCol = -1
		return true
	case (c == '-' && s.flow == 0 || c == '?') && s.expect && (next == 0 || isBlank(next) || next == '\n'):
		if s.pending.ok && s.pending.eol {
			s.openAnchor(0, -1) // the root sequence (or mapping of "?" keys)
		}
		if s.flow == 0 {
			s.collectionStarts()
			s.ownerCol = s.col()
			s.blockRoot(s.ownerCol)
		}
		s.pos++
	case c == ':' && (next == 0 || isBlank(next) || next == '\n' || next == '\r' || s.flow > 0):
		if s.flow == 0 {
			s.blockRoot(s.ownerCol)
		}
		s.pos++
		s.expect = true
	case c == '[' || c == '{':
		if !s.expect {
			return false
		}
		s.flow++
		if s.pending.ok {
			s.openAnchor(s.flow, 0)
		}
		s.pos++
	case c == ']' || c == '}':
		if s.flow == 0 {
			return false
		}
		if s.pending.ok {
			s.node(1)
		}
		for len(s.open) > 0 && s.open[len(s.open)-1].depth == s.flow {
			s.closeTop()
		}
		s.flow--
		s.pos++
		s.expect = false
		if s.flow == 0 && !s.block && !s.keyFollows() {
			s.pos = len(s.doc) // the root was this collection
		}
	case c == ',':
		if s.flow == 0 {
			return false
		}
		if s.pending.ok {
			s.node(1)
		}
		s.pos++
		s.expect = true
	case c == '*' || c == '&':
		name, end, ok := s.name(s.pos + 1)
		if !ok || !s.expect {
			return false
		}
		if c == '&' && s.pending.ok {
			// A second anchor: the first marks an empty node, the root if
			// nothing came before (and the decoder reads no further);
			// elsewhere the document is invalid.
			if s.flow > 0 || s.block {
				return false
			}
			s.node(1)
			s.pos = len(s.doc)
			return true
		}
		if c == '&' && s.propsCol < 0 {
			s.propsCol = s.col()
		}
		s.pos = end
		if c == '&' {
			// Aliases from here on name this node, not an earlier one of
			// the same name, known or not.
			delete(s.sizes, name)
			s.pending = pendingAnchor{ok: true, name: name, col: s.col()}
		} else {
			if s.pending.ok {
				// An alias takes no anchor: the anchor marks an empty node
				// before it, the root if nothing came before.
				s.node(1)
				if s.flow == 0 && !s.block {
					s.pos = len(s.doc)
				}
				return true
			}
			s.alias(name)
			s.expect = false
			if s.flow == 0 && !s.block && !s.keyFollows() {
				s.pos = len(s.doc) // the root was this alias
			}
		}
	case c == '!':
		if s.flow == 0 && !s.block {
			if s.rootTagged {
				s.node(1) // a second tag: the first marks an empty root
				s.pos = len(s.doc)
				return true
			}
			s.rootTagged = true
		}
		if s.propsCol < 0 {
			s.propsCol = s.col()
		}
		for s.pos < len(s.doc) && !isBlank(s.doc[s.pos]) && s.doc[s.pos] != '\n' &&
			(s.flow == 0 || !isFlowIndicator(s.doc[s.pos])) {
			s.pos++
		}
	case (c == '|' || c == '>') && s.flow == 0 && s.expect:
		s.node(1)
		s.skip(s.ownerCol)
		s.pos = s.eol(s.pos)
		s.expect = false
	case c == '"' || c == '\'':
		return s.quoted()
	default:
		s.plain()
	}
	return true
}

// startsPlain reports whether c, followed by next, starts a plain scalar.
func (s *yamlScanner) startsPlain(c, next byte) bool {
	switch c {
	case '[', ']', '{', '}', ',', '*', '&', '!', '|', '>', '"', '\'', '#', '%', '@', '`':
		return false
	case '-', '?', ':':
		return next != 0 && !isBlank(next) && next != '\n' && next != '\r' && !(s.flow > 0 && isFlowIndicator(next))
	}
	return true
}

// name reads an anchor or alias name from p and checks what follows it as
// the decoder does.
func (s *yamlScanner) name(p int) (uint64, int, bool) {
	end := p
	for end < len(s.doc) && isAnchorChar(s.doc[end]) {
		end++
	}
	if end == p {
		return 0, end, false
	}
	if end < len(s.doc) {
		switch c := s.doc[end]; {
		case isBlank(c) || c == '\n' || c == '\r':
		case c == '?' || c == ':' || c == ',' || c == ']' || c == '}' || c == '%' || c == '@' || c == '`':
		default:
			return 0, end, false
		}
	}
	return maphash.Bytes(s.seed, s.doc[p:end]), end, true
}

// quoted reads a single- or double-quoted scalar.
func (s *yamlScanner) quoted() bool {
	q, start, col := s.doc[s.pos], s.pos, s.col()
	multiLine, escapes, quotes := false, false, 0
	i := start + 1
	for ; i < len(s.doc); i++ {
		c := s.doc[i]
		if c == '\n' {
			multiLine = true
			s.lineStart = i + 1
		}
		if q == '"' && c == '\\' {
			escapes = true
			if i+1 < len(s.doc) && s.doc[i+1] == '\n' {
				multiLine = true
				s.lineStart = i + 2
			}
			i++
			continue
		}
		if c == q {
			if q == '\'' && i+1 < len(s.doc) && s.doc[i+1] == '\'' {
				quotes += 2
				i++
				continue
			}
			break
		}
	}
	if i >= len(s.doc) {
		return false // unterminated
	}
	s.pos = i + 1
	// A lower bound of the value's length: exact on one line without escapes.
	n := 0
	if !multiLine && !escapes {
		n = i - start - 1 - quotes/2
	}
	s.scalar(n, col, false)
	return true
}

// plain reads a plain scalar to where the decoder would end it on this line.
func (s *yamlScanner) plain() {
	start, col := s.pos, s.col()
	// The first character belongs to the scalar whatever it is: token()
	// read it as no indicator.
	i := start + 1
	for ; i < len(s.doc); i++ {
		c := s.doc[i]
		if c == '\n' {
			break
		}
		if c == ':' && (i+1 == len(s.doc) || isBlank(s.doc[i+1]) || s.doc[i+1] == '\n' || s.doc[i+1] == '\r' ||
			s.flow > 0 && isFlowIndicator(s.doc[i+1])) {
			break
		}
		if s.flow > 0 && isFlowIndicator(c) {
			break
		}
		if c == '#' && i > start && isBlank(s.doc[i-1]) {
			break
		}
	}
	s.pos = i
	if !s.expect {
		return // text after a node: the document is invalid, count nothing
	}
	text := bytes.TrimRight(s.doc[start:i], " \t\r")
	atEOL := i == len(s.doc) || s.doc[i] == '\n'
	s.scalar(len(text), col, atEOL)
}

// scalar finishes a scalar that started at column col, n bytes long at
// least: it may be a key, or anchored; a plain scalar that ran to the end of
// its line may go on over more indented lines, which are skipped.
func (s *yamlScanner) scalar(n, col int, plainToEOL bool) {
	if s.flow == 0 && s.keyFollows() {
		if s.pending.ok && s.pending.eol {
			s.openAnchor(0, -1) // an anchor alone on the root's line marks the root mapping
		}
		s.collectionStarts()
	}
	s.node(1 + uint64(n))
	if s.propsCol >= 0 {
		col = s.propsCol // the key node starts with its properties
	}
	s.propsCol = -1
	if s.keyFollows() {
		if s.flow == 0 {
			s.ownerCol = col
		}
		return // the value indicator is read next
	}
	s.expect = false
	if s.flow == 0 && !s.block {
		s.pos = len(s.doc) // the root was this scalar
		return
	}
	if plainToEOL && s.flow == 0 {
		if s.ownerCol >= 0 {
			s.skip(s.ownerCol)
		} else {
			s.skip(s.parentCol)
		}
	}
}

// blockRoot notes that the root is a block collection, at column col if
// it is not known yet (-1: the indentation of the line).
func (s *yamlScanner) blockRoot(col int) {
	if s.block {
		return
	}
	if col < 0 {
		col = 0
		for s.lineStart+col < len(s.doc) && s.doc[s.lineStart+col] == ' ' {
			col++
		}
	}
	s.block, s.rootCol = true, col
}

// keyFollows reports whether a value indicator follows the node that ends
// at pos on its line, making it a key.
func (s *yamlScanner) keyFollows() bool {
	j := s.pos
	for j < len(s.doc) && isBlank(s.doc[j]) {
		j++
	}
	return j < len(s.doc) && s.doc[j] == ':' &&
		(s.flow > 0 || j+1 == len(s.doc) || isBlank(s.doc[j+1]) || s.doc[j+1] == '\n' || s.doc[j+1] == '\r')
}

// skip skips the lines indented more than col; col -1 (the owner is not
// known) skips the rest of the document.
func (s *yamlScanner) skip(col int) {
	s.skipping, s.skipCol = true, col
	if col < 0 {
		s.incomplete = true
	}
}

// alias counts an alias to the anchor name, when the anchored node is known
// and does not contain the alias.
func (s *yamlScanner) alias(name uint64) {
	if s.openNames[name] > 0 {
		return
	}
	if size, ok := s.sizes[name]; ok {
		s.total = addCapped(s.total, size)
	}
}

// node counts a scalar or empty node of the given count, which the pending
// anchor, if any, marks.
func (s *yamlScanner) node(count uint64) {
	s.total = addCapped(s.total, count)
	if s.pending.ok {
		s.sizes[s.pending.name] = count
		s.pending = pendingAnchor{}
	}
}

// openAnchor starts the pending anchor's node: a flow collection (depth
// > 0), counted at once, or a block node, counted when it shows itself a
// collection.
func (s *yamlScanner) openAnchor(depth, col int) {
	s.open = append(s.open, anchoredCollection{name: s.pending.name, depth: depth, col: col, total0: s.total})
	s.openNames[s.pending.name]++
	s.pending = pendingAnchor{}
	if depth > 0 {
		s.open[len(s.open)-1].counted = true
		s.total = addCapped(s.total, 1)
	}
}

// collectionStarts counts the innermost open block node as a collection
// when a key or entry is its first token.
func (s *yamlScanner) collectionStarts() {
	if n := len(s.open); n > 0 {
		a := &s.open[n-1]
		if a.depth == 0 && !a.counted && s.total == a.total0 {
			a.counted = true
			s.total = addCapped(s.total, 1)
		}
	}
}

// closeTop ends the innermost open collection: its count is what was
// counted since it started, itself included.
func (s *yamlScanner) closeTop() {
	a := s.open[len(s.open)-1]
	s.open = s.open[:len(s.open)-1]
	s.openNames[a.name]--
	s.sizes[a.name] = s.total - a.total0
}

// hasOtherLineBreaks reports whether doc breaks lines other than with "\n"
// or "\r\n": a lone "\r", or NEL, LS or PS, which the decoder also reads as
// line breaks.
func hasOtherLineBreaks(doc []byte) bool {
	for i, c := range doc {
		if c == '\r' && (i+1 == len(doc) || doc[i+1] != '\n') {
			return true
		}
	}
	return bytes.Contains(doc, []byte("\u0085")) || bytes.Contains(doc, []byte("\u2028")) || bytes.Contains(doc, []byte("\u2029"))
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func isFlowIndicator(c byte) bool { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}' }
