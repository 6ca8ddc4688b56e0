package bootstrap

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/pilot/agent/config"
)

// ServerListenerNameTemplate is the Listener name a proxyless gRPC server
// asks for, "%s" being its listening IP:port (Istio's grpcxds).
const ServerListenerNameTemplate = "xds.istio.io/grpc/lds/inbound/%s"

// GRPCCertProvider is the certificate provider instance name the gRPC
// bootstrap defines (when OUTPUT_CERTS is set).
const GRPCCertProvider = "default"

// grpcBootstrap is gRPC's xDS bootstrap file format (gRFC A27, A29).
type grpcBootstrap struct {
	XDSServers                 []grpcServer            `json:"xds_servers"`
	Node                       grpcNode                `json:"node"`
	CertificateProviders       map[string]certProvider `json:"certificate_providers,omitempty"`
	ServerListenerNameTemplate string                  `json:"server_listener_resource_name_template"`
}

type grpcServer struct {
	ServerURI      string         `json:"server_uri"`
	ChannelCreds   []channelCreds `json:"channel_creds"`
	ServerFeatures []string       `json:"server_features"`
}

type channelCreds struct {
	Type string `json:"type"`
}

type grpcNode struct {
	ID       string           `json:"id"`
	Metadata *structpb.Struct `json:"metadata,omitempty"`
	Locality *grpcLocality    `json:"locality,omitempty"`
}

type grpcLocality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

type certProvider struct {
	PluginName string          `json:"plugin_name"`
	Config     fileWatcherConf `json:"config"`
}

type fileWatcherConf struct {
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
	CACertificateFile string `json:"ca_certificate_file"`
	RefreshInterval   string `json:"refresh_interval"`
}

// GRPC returns the gRPC xDS bootstrap JSON for proxyless gRPC apps: the
// agent's XDS socket as the (insecure, local) xDS server, the node with
// GENERATOR=grpc unless ISTIO_META_GENERATOR chose otherwise, the
// file_watcher certificate provider over OUTPUT_CERTS when it is set, and
// Istio's server listener name template.
func GRPC(cfg *config.Config) ([]byte, error) {
	sock, err := filepath.Abs(cfg.XDSSocket)
	if err != nil {
		return nil, fmt.Errorf("gRPC xDS bootstrap: XDS socket %q: %w", cfg.XDSSocket, err)
	}
	md, err := cfg.NodeMetadata()
	if err != nil {
		return nil, err
	}
	if _, ok := md.Fields["GENERATOR"]; !ok {
		md.Fields["GENERATOR"] = structpb.NewStringValue("grpc")
	}
	b := grpcBootstrap{
		XDSServers: []grpcServer{{
			ServerURI:      "unix://" + sock,
			ChannelCreds:   []channelCreds{{Type: "insecure"}},
			ServerFeatures: []string{"xds_v3"},
		}},
		Node:                       grpcNode{ID: cfg.NodeID(), Metadata: md},
		ServerListenerNameTemplate: ServerListenerNameTemplate,
	}
	if l := cfg.Locality(); l != nil {
		b.Node.Locality = &grpcLocality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	}
	if cfg.OutputCerts != "" {
		b.CertificateProviders = map[string]certProvider{GRPCCertProvider: {
			PluginName: "file_watcher",
			Config: fileWatcherConf{
				CertificateFile:   filepath.Join(cfg.OutputCerts, "cert-chain.pem"),
				PrivateKeyFile:    filepath.Join(cfg.OutputCerts, "key.pem"),
				CACertificateFile: filepath.Join(cfg.OutputCerts, "root-cert.pem"),
				RefreshInterval:   "900s",
			},
		}}
	}
	js, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("gRPC xDS bootstrap: %w", err)
	}
	return js, nil
}
