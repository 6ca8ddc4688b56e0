# pilot-agent image: meshpilot's agent beside Envoy, a drop-in for Istio's
# proxyv2 (same paths, same uid, same entrypoint), used by injected pods for
# both istio-init (`pilot-agent istio-iptables`) and istio-proxy.
# Build from the repository root (the context needs go.mod):
#   docker build -f docker/pilot-agent.Dockerfile \
#     --build-arg VERSION=0.1.0-dev -t ghcr.io/meshpilot/pilot-agent:0.1.0-dev .

ARG GO_VERSION=1.26
# Envoy's own release image; its binary is what proxyv2 ships at the same path.
ARG ENVOY_IMAGE=envoyproxy/envoy:v1.36.2

FROM golang:${GO_VERSION} AS build
ARG BINARY=pilot-agent
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

FROM ${ENVOY_IMAGE} AS envoy

# Not distroless: istio-init needs iptables-restore/ip6tables-restore (nft and
# legacy) and ip, and Envoy needs glibc. Debian's slim image has both.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 1337 istio-proxy \
 && useradd --uid 1337 --gid 1337 --home-dir /home/istio-proxy --create-home --shell /bin/false istio-proxy \
 && mkdir -p /etc/istio/proxy /var/lib/istio/data \
 && chown -R 1337:1337 /etc/istio /var/lib/istio
WORKDIR /
COPY --from=envoy /usr/local/bin/envoy /usr/local/bin/envoy
COPY --from=build /out/pilot-agent /usr/local/bin/pilot-agent
# Istio's proxy uid/gid (ProxyUID/ProxyGID of the injection templates);
# istio-init overrides it with runAsUser 0 and NET_ADMIN.
USER 1337:1337
# 15090 Envoy's Prometheus stats, 15021 health, 15020 the agent's merged
# metrics and probes.
EXPOSE 15020 15021 15090
ENTRYPOINT ["/usr/local/bin/pilot-agent"]
