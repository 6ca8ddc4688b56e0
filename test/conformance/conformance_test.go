package conformance_test

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/grpc"
	"sigs.k8s.io/gateway-api/conformance/utils/roundtripper"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/testutil"
	"github.com/meshpilot/meshpilot/pilot/bootstrap/bootstraptest"
	"github.com/meshpilot/meshpilot/pilot/config/gateway"
)

var reportDir = flag.String("report-dir", "", "directory to write gateway-api-conformance.md and its YAML report into (make conformance: docs)")

// TestMain adds dialSubtests to -test.skip (after any given): the status
// run must not dial the Gateway.
func TestMain(m *testing.M) {
	flag.Parse()
	skip := flag.Lookup("test.skip")
	pattern := dialSkipPattern()
	if given := skip.Value.String(); given != "" {
		pattern = given + "|" + pattern
	}
	if err := skip.Value.Set(pattern); err != nil {
		fmt.Fprintln(os.Stderr, "-test.skip:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// TestGatewayAPIConformance runs the Gateway API conformance suite
// (the profiles of profiles, with the features GatewayClass istio reports)
// against pilot-discovery in Kubernetes mode, leading, on a real
// kube-apiserver and etcd with the chart's Gateway API CRDs. Tests that
// send requests or dial the Gateway are skipped (noTraffic); every other
// test of a supported feature must pass. Then the tests that check status
// before sending requests run again, apart, each subtest sending a request
// or RPC skipped and each dialling one not run: their status checks must
// pass too. With -report-dir it writes the suite's report and a summary.
func TestGatewayAPIConformance(t *testing.T) {
	start := time.Now()
	ctx := t.Context()
	ps, err := runProfiles()
	if err != nil {
		t.Fatal(err)
	}
	// controller-runtime (the suite's client) logs nothing we read.
	crlog.SetLogger(logr.Discard())
	env := kubetest.Start(t)
	// The test runs in test/conformance, a module of its own.
	crds := filepath.Join("..", "..", "charts", "meshpilot", "crds", "gateway-api-standard.gen.yaml")
	if err := kubetest.InstallCRDs(ctx, env.Config(), crds); err != nil {
		t.Fatal(err)
	}
	gc, err := gwclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	si := &standIn{cs: env.Clientset(), log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	waitStandIn, err := si.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(waitStandIn) // ctx is cancelled before cleanups run

	opts := bootstraptest.Options(t)
	opts.KubeRestConfig = env.Config()
	bootstraptest.Start(t, opts)
	// pilot-discovery creates GatewayClass istio, as istiod does
	// (PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER): the suite uses
	// that one.
	testutil.EventuallyNoError(t, time.Minute, "GatewayClass istio created by pilot-discovery", func() error {
		got, err := gc.GatewayV1().GatewayClasses().Get(ctx, gateway.ClassName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Spec.ControllerName != gateway.ControllerName {
			return fmt.Errorf("controllerName %s", got.Spec.ControllerName)
		}
		return nil
	})

	// The suite's own scheme: the default one is client-go's global,
	// which pilot-discovery reads while it runs.
	scheme := runtime.NewScheme()
	for _, install := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gwv1.Install, v1beta1.Install, v1alpha2.Install, apiextensionsv1.AddToScheme} {
		if err := install(scheme); err != nil {
			t.Fatal(err)
		}
	}
	clientOpts := client.Options{Scheme: scheme}
	c, err := client.New(env.Config(), clientOpts)
	if err != nil {
		t.Fatal(err)
	}
	options := func(skip []string, rt noTrafficClient, res *results) suite.ConformanceOptions {
		return suite.ConformanceOptions{
			ConfigurableOptions: suite.ConfigurableOptions{
				GatewayClassName:     gateway.ClassName,
				CleanupBaseResources: false, // the API server is thrown away
				// Each test's objects go with it: the ReferenceGrants of one
				// would otherwise open what the next expects closed.
				CleanupTestResources: true,
				SkipTests:            skip,
				SupportedFeatures:    runFeatures(ps),
				TimeoutConfig:        timeouts(),
				ConformanceProfiles:  profileNames(ps),
				Implementation: confv1.Implementation{
					Organization: "meshpilot", Project: "meshpilot",
					URL: "https://github.com/meshpilot/meshpilot", Version: "main",
					Contact: []string{"@meshpilot/maintainers"},
				},
			},
			Client:        c,
			ClientOptions: clientOpts,
			Clientset:     env.Clientset(),
			RestConfig:    env.Config(),
			RoundTripper:  rt,
			GRPCClient:    rt,
			ManifestFS:    []fs.FS{&conformance.Manifests},
			Hook:          res.record,
		}
	}

	// The suite, as an implementation runs it for its report, minus the
	// tests that send requests. t.Run returns once its parallel tests are
	// done too, and the suite's cleanup has run (Report waits for it).
	res := newResults()
	cs, err := suite.NewConformanceTestSuite(options(sets.List(sets.KeySet(noTraffic)), noDataPlane{}, res))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("suite", func(t *testing.T) {
		cs.Setup(t, tests.ConformanceTests)
		res.start()
		if err := cs.Run(t, tests.ConformanceTests); err != nil {
			t.Fatal(err)
		}
	})
	report, err := cs.Report()
	if err != nil {
		t.Fatal(err)
	}

	// The status checks of the tests that mix status and requests: each
	// such test runs whole, except that every subtest sending a request
	// is skipped at its first request. These results stay out of the
	// suite's report (which lists the tests as skipped); the summary gives
	// them apart.
	statusOnly := newResults()
	skipper := &skipRequests{skipped: map[string][]string{}}
	var statusTests []suite.ConformanceTest
	for _, ct := range tests.ConformanceTests {
		// Every test that sends requests checks status first; the mirror
		// tests' other checks read backend logs, which cannot be skipped.
		if r := noTraffic[ct.ShortName]; r != "" && r != reqLogs {
			statusTests = append(statusTests, ct)
		}
	}
	cs2, err := suite.NewConformanceTestSuite(options(nil, skipper, statusOnly))
	if err != nil {
		t.Fatal(err)
	}
	cs2.ControllerName, cs2.Applier = cs.ControllerName, cs.Applier
	t.Run(statusRun, func(t *testing.T) {
		statusOnly.start()
		if err := cs2.Run(t, statusTests); err != nil {
			t.Fatal(err)
		}
	})
	if *reportDir != "" {
		if err := writeReports(*reportDir, ps, report, res, statusOnly, skipper, cs.SupportedFeatures, time.Since(start)); err != nil {
			t.Error(err)
		}
	}
}

// noTrafficClient is what sends the suite's requests (HTTP and TLS, through
// the round tripper) and RPCs.
type noTrafficClient interface {
	roundtripper.RoundTripper
	grpc.Client
}

// skipRequests skips, at its first request or RPC, every subtest that
// sends one: what runs of a test is its status checks.
type skipRequests struct {
	mu      sync.Mutex
	skipped map[string][]string // test -> subtests skipped
}

// skip skips t, the (sub)test sending what, on its own goroutine.
func (s *skipRequests) skip(t *testing.T, what string) {
	name := t.Name()
	parts := strings.SplitN(name, "/", 4) // TestX/status-of-skipped-tests/Test/sub...
	s.mu.Lock()
	if len(parts) >= 3 {
		s.skipped[parts[2]] = append(s.skipped[parts[2]], name)
	}
	s.mu.Unlock()
	t.Skipf("no data plane: %s not sent", what)
}

// CaptureRoundTrip implements roundtripper.RoundTripper. The suite calls it
// on the goroutine of the (sub)test sending the request.
func (s *skipRequests) CaptureRoundTrip(r roundtripper.Request) (*roundtripper.CapturedRequest, *roundtripper.CapturedResponse, error) {
	s.skip(r.T, "request to "+r.URL.String())
	return nil, nil, errors.New("unreachable")
}

// SendRPC implements grpc.Client, as CaptureRoundTrip does.
func (s *skipRequests) SendRPC(t *testing.T, address string, _ grpc.ExpectedResponse, _ time.Duration) (*grpc.Response, error) {
	s.skip(t, "RPC to "+address)
	return nil, errors.New("unreachable")
}

// Close implements grpc.Client.
func (s *skipRequests) Close() {}

// timeouts are the suite's, shortened: meshpilot writes status within
// about a second, so a status that is wrong fails in seconds, not minutes.
func timeouts() config.TimeoutConfig {
	tc := config.DefaultTimeoutConfig()
	short := 15 * time.Second
	tc.GatewayMustHaveAddress = short
	tc.GatewayMustHaveCondition = short
	tc.GatewayStatusMustHaveListeners = short
	tc.GatewayListenersMustHaveConditions = short
	tc.ListenerSetMustHaveCondition = short
	tc.ListenerSetListenersMustHaveConditions = short
	tc.GWCMustBeAccepted = 30 * time.Second
	tc.HTTPRouteMustNotHaveParents = short
	tc.HTTPRouteMustHaveCondition = short
	tc.TLSRouteMustHaveCondition = short
	tc.TCPRouteMustHaveCondition = short
	tc.UDPRouteMustHaveCondition = short
	tc.RouteMustHaveParents = short
	tc.LatestObservedGenerationSet = short
	tc.DefaultTestTimeout = short
	tc.NamespacesMustBeReady = 30 * time.Second
	tc.MaxTimeToConsistency = 5 * time.Second
	tc.RequestTimeout = time.Second
	tc.CreateTimeout = short
	return tc
}

// noDataPlane refuses every request and RPC: nothing here carries
// traffic. A test that sends one and is not in noTraffic fails, naming the
// request.
type noDataPlane struct{}

// CaptureRoundTrip implements roundtripper.RoundTripper.
func (noDataPlane) CaptureRoundTrip(r roundtripper.Request) (*roundtripper.CapturedRequest, *roundtripper.CapturedResponse, error) {
	return nil, nil, errors.New("no data plane in this environment: request to " + r.URL.String() + " not sent (add the test to noTraffic)")
}

// SendRPC implements grpc.Client.
func (noDataPlane) SendRPC(_ *testing.T, address string, _ grpc.ExpectedResponse, _ time.Duration) (*grpc.Response, error) {
	return nil, errors.New("no data plane in this environment: RPC to " + address + " not sent (add the test to noTraffic)")
}

// Close implements grpc.Client.
func (noDataPlane) Close() {}

// result is how one conformance test ended.
type result string

const (
	passed  result = "passed"
	failed  result = "failed"
	skipped result = "skipped"
)

// results collects each test's outcome from the suite's hook, and the
// time it took: the suite runs its tests one after the other (only the
// subtests of one run in parallel) and calls the hook as each ends, so a
// test took the time since the previous hook (or start).
type results struct {
	mu     sync.Mutex
	byName map[string]result
	took   map[string]time.Duration
	last   time.Time
}

func newResults() *results {
	return &results{byName: map[string]result{}, took: map[string]time.Duration{}}
}

// start marks the start of a run.
func (r *results) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = time.Now()
}

func (r *results) record(t *testing.T, test suite.ConformanceTest, _ *suite.ConformanceTestSuite) {
	out := passed
	switch {
	case t.Failed():
		out = failed
	case t.Skipped():
		out = skipped
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byName[test.ShortName] = out
	r.took[test.ShortName] = now.Sub(r.last)
	r.last = now
}
