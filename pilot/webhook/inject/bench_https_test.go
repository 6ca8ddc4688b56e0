package inject

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	meshconfig "istio.io/api/mesh/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/webhook/server"
)

// BenchmarkInjectHTTPS is the AdmissionReview latency of /inject as the API
// server sees it: the admission server over TLS (keep-alive connections),
// Istio's default ConfigMap, the hello pod, at 1 and 50 concurrent
// requests. It reports the p50 and p99 of the request latency.
func BenchmarkInjectHTTPS(b *testing.B) {
	inj := fixtureInjector(b)
	certPEM, keyPEM := testutil.SelfSignedCert(b, "istiod.istio-system.svc")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	srv := server.New(server.Options{
		TLS:        &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Injector:   &Webhook{Config: inj.Config, Mesh: func() *meshconfig.MeshConfig { return inj.mesh }},
		ProbeRoots: roots, ProbeServerName: "istiod.istio-system.svc",
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Serve: %v", err)
		}
	})
	if err := srv.WaitServing(ctx); err != nil {
		b.Fatal(err)
	}
	url := "https://" + lis.Addr().String() + "/inject"
	body := helloReview(b)

	for _, conc := range []int{1, 50} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12},
				MaxIdleConnsPerHost: conc,
			}}
			defer client.CloseIdleConnections()
			// conc goroutines share b.N requests; each records its latencies.
			var next atomic.Int64
			lat := make([][]time.Duration, conc)
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for g := range conc {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						start := time.Now()
						if err := postReview(client, url, body); err != nil {
							b.Error(err)
							return
						}
						lat[g] = append(lat[g], time.Since(start))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			if len(all) == 0 {
				return
			}
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
		})
	}
}

func helloReview(b *testing.B) []byte {
	raw, err := json.Marshal(helloPod(b))
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Namespace: "apps", Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw}, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// postReview sends one review and checks that the answer carries a patch.
func postReview(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	out := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(raw, out); err != nil {
		return err
	}
	if out.Response == nil || len(out.Response.Patch) == 0 {
		return fmt.Errorf("no patch in the answer: %s", raw)
	}
	return nil
}
