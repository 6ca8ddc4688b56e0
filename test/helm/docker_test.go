package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/meshpilot/meshpilot/internal/fixtures"
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

	// The builder image must satisfy go.mod's go directive (major.minor).
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
