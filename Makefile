# meshpilot — see README.md. Every target works on a fresh machine with Go.
SHELL := /bin/bash
GO ?= go
BIN := bin
VERSION ?= 0.1.0-dev
LDFLAGS := -X github.com/meshpilot/meshpilot/internal/version.Version=$(VERSION)
BENCH_PKGS := ./model/... ./pilot/networking/... ./pilot/ca/... ./xds/...
BENCHTIME ?= 1s
# Every package with a benchmark; make test runs each benchmark once.
BENCH_SMOKE_PKGS = $(shell git grep -l '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')
BENCHCOUNT ?= 5
# Fuzz targets as PACKAGE:FUNC; make test runs each for FUZZTIME.
FUZZ_TARGETS := ./pilot/ca:FuzzParseCSR ./pilot/ca:FuzzParsePEMBundle ./pilot/ca/server:FuzzCreateCertificate \
	./pilot/agent/config:FuzzFromEnv ./pilot/agent/dns:FuzzParseQuery ./model:FuzzParseProxy ./pilot/ca/authn:FuzzParseSPIFFEID \
	./pilot/ca/authn:FuzzJWTClaims ./xds:FuzzSotWRequests ./xds:FuzzDeltaRequests \
	./pilot/config/file:FuzzLoad ./pilot/config/file:FuzzParse ./pilot/config/file:FuzzParseDoc ./pilot/config/file:FuzzNormalizeDurations \
	./pilot/webhook/server:FuzzReview ./pilot/webhook/server:FuzzValidateKinds ./pilot/webhook/inject:FuzzAdmit ./pilot/webhook/inject:FuzzInjectAnnotations ./pilot/agent/wasm:FuzzConvert \
	./serviceregistry/multicluster:FuzzKubeconfig ./pilot/autoregistration:FuzzRegistration
FUZZTIME ?= 10s
# Golden tests (see internal/golden) and their packages; make golden rewrites them.
GOLDEN_PKGS := ./pilot/networking/gateway ./pilot/networking/cluster ./pilot/networking/authz \
	./pilot/networking/listener ./pilot/networking/telemetry ./pilot/config/support ./pilot/explain \
	./pilot/config/gateway
GOLDEN_TESTS := TestGolden|TestTLSRouteGolden|TestDocUpToDate|TestAutoPassthrough

.PHONY: all build run test testenv lint bench bench-smoke fmt clean crds chart-lint load fuzz golden conformance conformance-check

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

## run: the control plane on the bundled Bookinfo mesh, no cluster needed.
run: build
	@echo "meshpilot discovery on examples/bookinfo (Ctrl-C to stop)"
	@echo "  xDS (plaintext ADS):  localhost:15010"
	@echo "  xDS + CA over TLS:    localhost:15012 (self-signed root in memory; client certificates only, no cluster for tokens)"
	@echo "  admission webhooks:   https://localhost:15017/validate  /inject (certificate from the same CA)"
	@echo "  readiness:            http://localhost:8080/ready"
	@echo "  debug:                http://localhost:8080/debug/list  /debug/syncz  /debug/connectionz  /debug/config_dump?proxyID=..."
	@echo "  console:              http://localhost:8080/ui/"
	@echo "  metrics:              http://localhost:15014/metrics"
	@echo "  edit examples/bookinfo/*.yaml and the change is pushed within the debounce window"
	$(BIN)/pilot-discovery discovery --configDir examples/bookinfo --meshConfig examples/mesh.yaml

## test: test tools (first run only) and lint side by side (both compile:
## vet -race fills the build cache the suite uses), then the whole suite under
## the race detector, every benchmark once, and a short run of every fuzz
## target. A test environment that cannot be produced stops it.
## Each phase's wall time is printed (bash's time).
test:
	time $(MAKE) -j2 --output-sync=target testenv lint
	time hack/testenv.sh exec $(GO) test -count=1 -race -timeout 30m ./...
	time $(MAKE) conformance-check
	time $(MAKE) bench-smoke
	time $(MAKE) fuzz FUZZ_FRESH=1

## bench-smoke: every benchmark once (-benchtime 1x), so a broken one fails
## make test; the figures mean nothing. Under -race, sharing the suite's build
## cache, and -short, which shrinks the largest meshes (xds scaled()).
bench-smoke:
	hack/testenv.sh exec $(GO) test -count=1 -race -short -run '^$$' -bench . -benchtime 1x $(BENCH_SMOKE_PKGS)

## fuzz: each fuzz target for FUZZTIME (make fuzz FUZZTIME=10m for a long run),
## FUZZJOBS targets at a time, one worker each. -fuzzminimizetime bounds
## minimisation, which otherwise stalls short runs. First, one package at a
## time, the coverage-instrumented test binaries are built (go test -c): the
## fuzz build instruments every dependency, and two go commands building side
## by side would each compile the ones they share (no cross-process dedup in
## the build cache); the runs then find everything cached.
FUZZJOBS ?= 2
## FUZZ_FRESH=1 (make test) first drops the corpus the go command keeps in
## its build cache from earlier runs: a 10 s run must first replay that
## corpus, which grows with every run on one machine, and once replaying it
## outlasts FUZZTIME the target fails ("context deadline exceeded") though
## it found nothing. The seeds and testdata/fuzz stay; longer runs keep it.
## hack/fuzz-one.sh runs one target, and reruns it once, longer, when only
## that deadline failed (no input failed) on a busy machine.
FUZZ_FRESH ?=
FUZZ_PKGS = $(shell printf '%s\n' $(FUZZ_TARGETS) | sed 's/:.*//' | sort -u)
fuzz:
	@if [ -n "$(FUZZ_FRESH)" ]; then $(GO) clean -fuzzcache; fi
	@for p in $(FUZZ_PKGS); do $(GO) test -c -o /dev/null -fuzz . $$p || exit 1; done
	@printf '%s\n' $(FUZZ_TARGETS) | GO=$(GO) xargs -P $(FUZZJOBS) -I{} hack/fuzz-one.sh {} $(FUZZTIME)

## conformance: the Gateway API project's conformance suite against
## pilot-discovery on its own API server (test/conformance, a module of its
## own so the main one stays free of controller-runtime); writes
## docs/gateway-api-conformance.md and the suite's YAML report next to it.
## conformance-check (make test) runs it under -race, writing nothing.
CONFORMANCE_RUN = cd test/conformance && ../../hack/testenv.sh exec $(GO) test -count=1 -timeout 15m -run '^TestGatewayAPIConformance$$'
conformance: testenv
	$(CONFORMANCE_RUN) . -args -report-dir $(CURDIR)/docs
	@grep -m1 'passed,' docs/gateway-api-conformance.md

conformance-check:
	$(CONFORMANCE_RUN) -race .

## golden: rewrite every golden file from the current code (go test -update on
## GOLDEN_TESTS), delete stale ones, then show what changed for review.
golden:
	$(GO) test -count=1 -run '^($(GOLDEN_TESTS))$$' $(GOLDEN_PKGS) -update
	@git status --short -- $(GOLDEN_PKGS:./%=%) docs/istio-api-support.md

## testenv: etcd, kube-apiserver and helm for the integration tests, built once
## and cached in ~/.cache/meshpilot (see docs/testenv.md).
testenv:
	hack/testenv.sh install

## crds: copy the Istio CRDs from the istio.io/api module in go.mod into the chart.
crds:
	hack/update-crds.sh

## load: the issue-3 workload with pilot-load, 3 runs each of Delta and SotW (see BENCHMARKS.md).
load:
	hack/load-bench.sh delta 3
	hack/load-bench.sh sotw 3

chart-lint: testenv
	hack/testenv.sh exec bash -c '$$MESHPILOT_HELM lint --strict --kube-version v1.37.2 charts/meshpilot'

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet -race ./...
	cd test/conformance && $(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: Go benchmarks; feed the output to benchstat for medians.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) -timeout 60m $(BENCH_PKGS) | tee bench.out

clean:
	rm -rf $(BIN) bench.out
