package server

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	securityapi "istio.io/api/security/v1alpha1"

	"github.com/meshpilot/meshpilot/pilot/ca"
	"github.com/meshpilot/meshpilot/pilot/ca/authn"
)

// fixedCaller authenticates every call as one identity (the property under
// fuzzing is what the service does after authentication).
type fixedCaller struct{ c *authn.Caller }

func (f fixedCaller) Name() string                                        { return "fixed" }
func (f fixedCaller) Authenticate(context.Context) (*authn.Caller, error) { return f.c, nil }

// FuzzCreateCertificate feeds arbitrary wire bytes, decoded as an
// IstioCertificateRequest, to the service. Whatever the input, it must not
// panic, and a certificate it issues carries exactly the caller's identity.
//
//	go test -run '^$' -fuzz FuzzCreateCertificate -fuzztime 30s ./pilot/ca/server/
func FuzzCreateCertificate(f *testing.F) {
	const id = "spiffe://cluster.local/ns/fuzz/sa/caller"
	bundle, err := ca.NewSelfSigned(ca.SelfSignedOptions{})
	if err != nil {
		f.Fatal(err)
	}
	svc := NewCertificateService(Options{
		Authority: ca.NewAuthority(bundle, ca.DefaultPolicy()),
		Metrics:   NewMetrics(prometheus.NewRegistry()),
		Authenticator: fixedCaller{&authn.Caller{
			Identities: []string{id}, Namespace: "fuzz", ServiceAccount: "caller", Source: authn.SourceJWT,
		}},
	})
	seed := func(req *securityapi.IstioCertificateRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&securityapi.IstioCertificateRequest{Csr: testCSR(f, id), ValidityDuration: 3600})
	seed(&securityapi.IstioCertificateRequest{Csr: testCSR(f, "spiffe://cluster.local/ns/fuzz/sa/other")})
	seed(&securityapi.IstioCertificateRequest{Csr: testCSR(f, id), ValidityDuration: -1})
	seed(&securityapi.IstioCertificateRequest{Csr: testCSR(f, id), ValidityDuration: 18446744074})
	seed(&securityapi.IstioCertificateRequest{Csr: testCSR(f, id), Metadata: &structpb.Struct{
		Fields: map[string]*structpb.Value{impersonationKey: structpb.NewStringValue("spiffe://cluster.local/ns/a/sa/b")},
	}})
	f.Add([]byte{0x0a, 0x03, 'x', 'y', 'z'})

	f.Fuzz(func(t *testing.T, wire []byte) {
		req := &securityapi.IstioCertificateRequest{}
		if proto.Unmarshal(wire, req) != nil {
			return
		}
		issued := time.Now()
		resp, err := svc.CreateCertificate(context.Background(), req)
		if err != nil {
			return
		}
		block, _ := pem.Decode([]byte(resp.GetCertChain()[0]))
		if block == nil {
			t.Fatal("issued chain[0] is not PEM")
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		// The certificate lives as long as asked (the default for 0): a
		// duration that overflowed on conversion would not.
		// Compared in seconds, where nothing overflows.
		want := int64(ca.DefaultPolicy().DefaultTTL / time.Second)
		if v := req.GetValidityDuration(); v != 0 {
			want = v
		}
		if lifetime := leaf.NotAfter.Unix() - issued.Unix(); lifetime < want-1 {
			t.Fatalf("validity_duration %d: certificate expires %ds after issue, want %ds", req.GetValidityDuration(), lifetime, want)
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id || len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
			t.Fatalf("issued a certificate with URIs %v DNS %v IPs %v emails %v", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
		}
	})
}
