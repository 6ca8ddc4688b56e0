# pilot-discovery image: a static Go binary on distroless, running as non-root.
# Build from the repository root (the context needs go.mod):
#   docker build -f docker/pilot-discovery.Dockerfile \
#     --build-arg VERSION=0.1.0-dev -t ghcr.io/meshpilot/pilot-discovery:0.1.0-dev .
# Other binaries copy this file and change BINARY (see docker/README.md).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
ARG BINARY=pilot-discovery
ARG VERSION=0.1.0-dev
WORKDIR /src
# Dependencies first, so source edits reuse the module download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no cgo), reproducible (-trimpath), stripped; version stamped in.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/meshpilot/meshpilot/internal/version.Version=${VERSION}" \
      -o /out/${BINARY} ./cmd/${BINARY}

# distroless/static:nonroot has CA certificates and tzdata, no shell, and runs
# as uid/gid 65532 (the chart's podSecurityContext uses the same ids).
FROM gcr.io/distroless/static:nonroot
# Istio's default --meshConfig (./etc/istio/config/mesh) is relative to /.
WORKDIR /
COPY --from=build /out/pilot-discovery /usr/local/bin/pilot-discovery
USER 65532:65532
# Istio's ports: 15010 xDS, 15012 xDS+CA (TLS), 15014 metrics, 15017 webhooks,
# 8080 readiness and debug.
EXPOSE 8080 15010 15012 15014 15017
ENTRYPOINT ["/usr/local/bin/pilot-discovery"]
CMD ["discovery"]
