package dns

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzParseQuery feeds arbitrary bytes, as a pod may send to 15053, to the
// query parser: no panic, and every query it accepts gets well-formed
// answers (found, failure, truncated) that echo its ID and question.
func FuzzParseQuery(f *testing.F) {
	for _, name := range []string{"reviews.default.svc.cluster.local.", "a.", "x.example.com."} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		_ = b.StartQuestions()
		_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		msg, err := b.Finish()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c})
	e := &entry{canonical: "reviews.default.svc.cluster.local.",
		v4: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, v6: []netip.Addr{netip.MustParseAddr("fd00::1")}}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := parseQuery(b)
		if err != nil {
			return
		}
		check := func(what string, out []byte, err error) {
			if err != nil {
				t.Fatalf("%s for an accepted query: %v", what, err)
			}
			var p dnsmessage.Parser
			h, err := p.Start(out)
			if err != nil || h.ID != q.header.ID || !h.Response {
				t.Fatalf("%s: header %+v, %v; want a response with ID %d", what, h, err, q.header.ID)
			}
			got, err := p.Question()
			if err != nil || got != q.question {
				t.Fatalf("%s: question %v, %v; want %v", what, got, err, q.question)
			}
		}
		out, err := answer(q, e, true, true)
		check("answer", out, err)
		out, err = failure(q, dnsmessage.RCodeServerFailure)
		check("failure", out, err)
		out, err = truncated(q)
		check("truncated", out, err)
	})
}
