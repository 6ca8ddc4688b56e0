package dns

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// ttl is the TTL of answers from the name table, in seconds (Istio's 30).
const ttl = 30

// minUDPSize is the largest UDP response a client without EDNS(0) accepts.
const minUDPSize = 512

var errNotQuery = errors.New("not a query")

// query is what the proxy needs of a request.
type query struct {
	header   dnsmessage.Header
	question dnsmessage.Question
	// udpSize is the largest UDP response the client accepts.
	udpSize int
}

// parseQuery reads the header, the one question and any EDNS(0) OPT record.
func parseQuery(b []byte) (query, error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil {
		return query{}, fmt.Errorf("header: %w", err)
	}
	q := query{header: h, udpSize: minUDPSize}
	if h.Response || h.OpCode != 0 {
		return q, errNotQuery
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return q, fmt.Errorf("question: %w", err)
	}
	if len(qs) != 1 {
		return q, fmt.Errorf("%d questions, want 1", len(qs))
	}
	q.question = qs[0]
	if err := p.SkipAllAnswers(); err != nil {
		return q, nil
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return q, nil
	}
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			break
		}
		if rh.Type == dnsmessage.TypeOPT && int(rh.Class) > minUDPSize {
			q.udpSize = int(rh.Class)
		}
		if err := p.SkipAdditional(); err != nil {
			break
		}
	}
	return q, nil
}

// name returns the question's name, lower case, with a trailing dot.
func (q query) name() string {
	n := strings.ToLower(q.question.Name.String())
	if !strings.HasSuffix(n, ".") {
		n += "."
	}
	return n
}

// answer builds the response to q from e: a CNAME from the name asked to
// the host when alias, then the host's addresses of the type asked (none,
// NOERROR, for other types or a family it lacks). On UDP a response larger
// than the client accepts is sent truncated, without records.
func answer(q query, e *entry, alias bool, udp bool) ([]byte, error) {
	b := newResponse(q, dnsmessage.RCodeSuccess)
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	target := q.question.Name
	if alias {
		cname, err := dnsmessage.NewName(e.canonical)
		if err != nil {
			return nil, err
		}
		rh := dnsmessage.ResourceHeader{Name: q.question.Name, Class: dnsmessage.ClassINET, TTL: ttl}
		if err := b.CNAMEResource(rh, dnsmessage.CNAMEResource{CNAME: cname}); err != nil {
			return nil, err
		}
		target = cname
	}
	rh := dnsmessage.ResourceHeader{Name: target, Class: dnsmessage.ClassINET, TTL: ttl}
	switch q.question.Type {
	case dnsmessage.TypeA:
		for _, a := range e.v4 {
			if err := b.AResource(rh, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, err
			}
		}
	case dnsmessage.TypeAAAA:
		for _, a := range e.v6 {
			if err := b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()}); err != nil {
				return nil, err
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if udp && len(out) > q.udpSize {
		return truncated(q)
	}
	return out, nil
}

// truncated is an empty response with the TC bit: the client retries over TCP.
func truncated(q query) ([]byte, error) {
	b := newResponseHeader(q, dnsmessage.RCodeSuccess, true)
	return b.Finish()
}

// failure is a response of rcode with the question echoed.
func failure(q query, rcode dnsmessage.RCode) ([]byte, error) {
	b := newResponse(q, rcode)
	return b.Finish()
}

func newResponse(q query, rcode dnsmessage.RCode) *dnsmessage.Builder {
	return newResponseHeader(q, rcode, false)
}

func newResponseHeader(q query, rcode dnsmessage.RCode, tc bool) *dnsmessage.Builder {
	h := dnsmessage.Header{
		ID: q.header.ID, Response: true, RecursionDesired: q.header.RecursionDesired,
		RecursionAvailable: true, RCode: rcode, Truncated: tc,
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, minUDPSize), h)
	b.EnableCompression()
	if q.question.Name.Length > 0 {
		if err := b.StartQuestions(); err == nil {
			_ = b.Question(q.question)
		}
	}
	return &b
}
