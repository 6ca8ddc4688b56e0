package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
	"github.com/meshpilot/meshpilot/model"
	"github.com/meshpilot/meshpilot/pilot/webhook/inject"
)

// TestDockerfileMatchesChart checks what can be checked without a container
// runtime: the image is static, distroless and non-root, its Go builder is
// new enough for go.mod, and the chart runs it as the image's user with the
// image's entrypoint and mesh config path.
func TestDockerfileMatchesChart(t *testing.T) {
	root := fixtures.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docker", "pilot-discovery.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	for _, want := range []string{
		"CGO_ENABLED=0 go build -trimpath",
		"./cmd/${BINARY}",
		"ARG BINARY=pilot-discovery",
		"FROM gcr.io/distroless/static:nonroot",
		"WORKDIR /\n",
		"COPY --from=build /out/pilot-discovery /usr/local/bin/pilot-discovery",
		"USER 65532:65532",
		`ENTRYPOINT ["/usr/local/bin/pilot-discovery"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("docker/pilot-discovery.Dockerfile lacks %q", want)
		}
	}

	checkGoVersion(t, root, df)

	dep := only[*appsv1.Deployment](t, render(t))
	spec := dep.Spec.Template.Spec
	if u := spec.SecurityContext.RunAsUser; u == nil || strconv.FormatInt(*u, 10) != "65532" {
		t.Errorf("pod runAsUser %v, want the image's 65532", u)
	}
	c := spec.Containers[0]
	if len(c.Command) != 0 {
		t.Errorf("container overrides the image entrypoint with %v", c.Command)
	}
	if !strings.HasSuffix(c.Image, "/pilot-discovery:0.1.0-dev") {
		t.Errorf("image %q is not the pilot-discovery image", c.Image)
	}
}

// TestAgentDockerfileMatchesInjection checks the agent image against what
// the chart's injection templates expect of it with
// sidecarInjector.agentImage=meshpilot: pilot-agent as entrypoint (the
// templates pass only arguments), Envoy at ProxyConfig's default binaryPath,
// iptables for istio-init, and Istio's proxy uid/gid.
func TestAgentDockerfileMatchesInjection(t *testing.T) {
	root := fixtures.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docker", "pilot-agent.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	for _, want := range []string{
		"CGO_ENABLED=0 go build -trimpath",
		"ARG BINARY=pilot-agent",
		"COPY --from=envoy /usr/local/bin/envoy " + model.DefaultProxyConfig().GetBinaryPath() + "\n",
		"COPY --from=build /out/pilot-agent /usr/local/bin/pilot-agent",
		"iptables iproute2",
		"USER 1337:1337",
		`ENTRYPOINT ["/usr/local/bin/pilot-agent"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("docker/pilot-agent.Dockerfile lacks %q", want)
		}
	}
	checkGoVersion(t, root, df)

	inj := chartInjector(t, "sidecarInjector.agentImage=meshpilot")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: "hello"}}}}
	got, err := inj.Inject(pod, inject.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(got.Spec.InitContainers, got.Spec.Containers...) {
		if c.Name == "hello" {
			continue
		}
		if len(c.Command) != 0 || !strings.HasSuffix(c.Image, "/pilot-agent:0.1.0-dev") {
			t.Errorf("%s: image %q command %v, want the agent image's entrypoint", c.Name, c.Image, c.Command)
		}
		if c.Name == "istio-proxy" && (c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != 1337) {
			t.Errorf("istio-proxy runs as %v, want the image's 1337", c.SecurityContext.RunAsUser)
		}
	}
}

// checkGoVersion fails unless the Dockerfile's builder image satisfies
// go.mod's go directive (major.minor).
func checkGoVersion(t *testing.T, root, df string) {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	argLine := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindStringSubmatch(df)
	if goLine == nil || argLine == nil {
		t.Fatalf("go directive %v or ARG GO_VERSION %v not found", goLine, argLine)
	}
	if !strings.HasPrefix(argLine[1], goLine[1]) {
		t.Errorf("Dockerfile builds with Go %s, go.mod says go %s", argLine[1], goLine[1])
	}

}
