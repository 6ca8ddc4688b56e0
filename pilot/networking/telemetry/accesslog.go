package telemetry

import (
	"fmt"
	"sort"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	otelalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	"go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	tpb "istio.io/api/telemetry/v1alpha1"
)

// Access logger names and Istio's default formats.
const (
	FileAccessLogName = "envoy.access_loggers.file"
	OTelAccessLogName = "envoy.access_loggers.open_telemetry"
	HTTPGrpcLogName   = "envoy.access_loggers.http_grpc"
	TCPGrpcLogName    = "envoy.access_loggers.tcp_grpc"
	celFilterName     = "envoy.access_loggers.extension_filters.cel"

	// DefaultTextFormat is Istio's access log format when none is given.
	DefaultTextFormat = "[%START_TIME%] \"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\" " +
		"%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% " +
		"\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% " +
		"%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \"%REQ(X-FORWARDED-FOR)%\" \"%REQ(USER-AGENT)%\" " +
		"\"%REQ(X-REQUEST-ID)%\" \"%REQ(:AUTHORITY)%\" \"%UPSTREAM_HOST%\" %UPSTREAM_CLUSTER_RAW% " +
		"%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% " +
		"%REQUESTED_SERVER_NAME% %ROUTE_NAME%\n"

	devStdout = "/dev/stdout"
	// otelLogName is the OpenTelemetry access log's default log name;
	// httpALSLogName and tcpALSLogName the gRPC access log services'.
	otelLogName    = "otel_envoy_accesslog"
	httpALSLogName = "http_envoy_accesslog"
	tcpALSLogName  = "tcp_envoy_accesslog"
)

// logKind says where a provider's access log goes.
type logKind int

const (
	httpAndTCP logKind = iota
	httpOnly           // envoyHttpAls: HTTP connection managers
	tcpOnly            // envoyTcpAls: tcp_proxy
)

// peerStateToLog is the filter state the gRPC access log services get by
// default: the peer metadata Istio's metadata exchange stores.
var peerStateToLog = []string{"upstream_peer", "downstream_peer"}

// defaultJSONFormat is Istio's JSON access log format when none is given.
func defaultJSONFormat() *structpb.Struct {
	fields := map[string]string{
		"start_time": "%START_TIME%", "route_name": "%ROUTE_NAME%", "method": "%REQ(:METHOD)%",
		"path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "protocol": "%PROTOCOL%", "response_code": "%RESPONSE_CODE%",
		"response_flags": "%RESPONSE_FLAGS%", "response_code_details": "%RESPONSE_CODE_DETAILS%",
		"connection_termination_details": "%CONNECTION_TERMINATION_DETAILS%", "bytes_received": "%BYTES_RECEIVED%",
		"bytes_sent": "%BYTES_SENT%", "duration": "%DURATION%", "upstream_service_time": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%",
		"x_forwarded_for": "%REQ(X-FORWARDED-FOR)%", "user_agent": "%REQ(USER-AGENT)%", "request_id": "%REQ(X-REQUEST-ID)%",
		"authority": "%REQ(:AUTHORITY)%", "upstream_host": "%UPSTREAM_HOST%", "upstream_cluster": "%UPSTREAM_CLUSTER_RAW%",
		"upstream_local_address": "%UPSTREAM_LOCAL_ADDRESS%", "downstream_local_address": "%DOWNSTREAM_LOCAL_ADDRESS%",
		"downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%", "requested_server_name": "%REQUESTED_SERVER_NAME%",
		"upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
	}
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range fields {
		s.Fields[k] = structpb.NewStringValue(v)
	}
	return s
}

// textFormat is format with the newline Istio appends when missing, or
// the default format.
func textFormat(format string) string {
	if format == "" {
		return DefaultTextFormat
	}
	if !strings.HasSuffix(format, "\n") {
		format += "\n"
	}
	return format
}

func textLogFormat(format string, omitEmpty bool) *corev3.SubstitutionFormatString {
	return &corev3.SubstitutionFormatString{
		Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: &corev3.DataSource{
			Specifier: &corev3.DataSource_InlineString{InlineString: textFormat(format)},
		}},
		OmitEmptyValues: omitEmpty,
	}
}

func jsonLogFormat(s *structpb.Struct, omitEmpty bool) *corev3.SubstitutionFormatString {
	if len(s.GetFields()) == 0 {
		s = defaultJSONFormat()
	}
	return &corev3.SubstitutionFormatString{
		Format:            &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: s},
		JsonFormatOptions: &corev3.JsonFormatOptions{SortProperties: false},
		OmitEmptyValues:   omitEmpty,
	}
}

func fileAccessLog(path string, format *corev3.SubstitutionFormatString) (*accesslogv3.AccessLog, error) {
	cfg, err := pack(&filev3.FileAccessLog{
		Path:            path,
		AccessLogFormat: &filev3.FileAccessLog_LogFormat{LogFormat: format},
	})
	if err != nil {
		return nil, fmt.Errorf("file access log %s: %w", path, err)
	}
	return &accesslogv3.AccessLog{Name: FileAccessLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: cfg}}, nil
}

// meshAccessLog is the access log of MeshConfig accessLogFile,
// accessLogEncoding and accessLogFormat (a JSON object for JSON; an
// invalid one falls back to the default), nil when accessLogFile is empty.
func meshAccessLog(mesh *meshconfig.MeshConfig, path string) (*accesslogv3.AccessLog, []string, error) {
	if path == "" {
		return nil, nil, nil
	}
	if mesh.GetAccessLogEncoding() == meshconfig.MeshConfig_JSON {
		var warnings []string
		s := &structpb.Struct{}
		if f := mesh.GetAccessLogFormat(); f != "" {
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(f), s); err != nil {
				warnings = append(warnings, fmt.Sprintf("mesh accessLogFormat is not a JSON object, default format used: %v", err))
				s = nil
			}
		}
		al, err := fileAccessLog(path, jsonLogFormat(s, false))
		return al, warnings, err
	}
	al, err := fileAccessLog(path, textLogFormat(mesh.GetAccessLogFormat(), false))
	return al, nil, err
}

// providerAccessLog is the access log of an extension provider and where
// it goes, nil for providers that do not log.
func providerAccessLog(mesh *meshconfig.MeshConfig, p *meshconfig.MeshConfig_ExtensionProvider, clusters clusterLookup) (*accesslogv3.AccessLog, logKind, []string, error) {
	switch prov := p.GetProvider().(type) {
	case *meshconfig.MeshConfig_ExtensionProvider_EnvoyFileAccessLog:
		f := prov.EnvoyFileAccessLog
		path := f.GetPath()
		if path == "" {
			path = devStdout
		}
		// The built-in provider takes its format from the mesh settings.
		if p.GetName() == builtinAccessLogProvider && f.GetLogFormat() == nil && !f.GetOmitEmptyValues() {
			al, warnings, err := meshAccessLog(mesh, path)
			return al, httpAndTCP, warnings, err
		}
		if labels := f.GetLogFormat().GetLabels(); labels != nil {
			al, err := fileAccessLog(path, jsonLogFormat(labels, f.GetOmitEmptyValues()))
			return al, httpAndTCP, nil, err
		}
		al, err := fileAccessLog(path, textLogFormat(f.GetLogFormat().GetText(), f.GetOmitEmptyValues()))
		return al, httpAndTCP, nil, err
	case *meshconfig.MeshConfig_ExtensionProvider_EnvoyOtelAls:
		al, err := otelAccessLog(prov.EnvoyOtelAls, clusters)
		if err != nil {
			return nil, 0, []string{fmt.Sprintf("access log provider %s: %v", p.GetName(), err)}, nil
		}
		return al, httpAndTCP, nil, nil
	case *meshconfig.MeshConfig_ExtensionProvider_EnvoyHttpAls:
		al, err := httpALS(prov.EnvoyHttpAls, clusters)
		if err != nil {
			return nil, 0, []string{fmt.Sprintf("access log provider %s: %v", p.GetName(), err)}, nil
		}
		return al, httpOnly, nil, nil
	case *meshconfig.MeshConfig_ExtensionProvider_EnvoyTcpAls:
		al, err := tcpALS(prov.EnvoyTcpAls, clusters)
		if err != nil {
			return nil, 0, []string{fmt.Sprintf("access log provider %s: %v", p.GetName(), err)}, nil
		}
		return al, tcpOnly, nil, nil
	}
	return nil, 0, nil, nil
}

// alsCommon is the gRPC access log service part of envoyHttpAls and
// envoyTcpAls: the log name (def when empty), the provider's service as an
// Envoy gRPC cluster, and the filter state to log (the peer metadata when
// none is given), as istiod builds it.
func alsCommon(service string, port uint32, logName, def string, state []string, clusters clusterLookup) (*grpcalsv3.CommonGrpcAccessLogConfig, error) {
	host, cluster, err := clusters(service, port)
	if err != nil {
		return nil, err
	}
	if logName == "" {
		logName = def
	}
	if len(state) == 0 {
		state = peerStateToLog
	}
	return &grpcalsv3.CommonGrpcAccessLogConfig{
		LogName: logName,
		GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
			EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host},
		}},
		TransportApiVersion:     corev3.ApiVersion_V3,
		FilterStateObjectsToLog: state,
	}, nil
}

// httpALS is the HTTP gRPC access log service logger of an envoyHttpAls provider.
func httpALS(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyHttpGrpcV3LogProvider, clusters clusterLookup) (*accesslogv3.AccessLog, error) {
	common, err := alsCommon(p.GetService(), p.GetPort(), p.GetLogName(), httpALSLogName, p.GetFilterStateObjectsToLog(), clusters)
	if err != nil {
		return nil, err
	}
	a, err := pack(&grpcalsv3.HttpGrpcAccessLogConfig{
		CommonConfig:                    common,
		AdditionalRequestHeadersToLog:   p.GetAdditionalRequestHeadersToLog(),
		AdditionalResponseHeadersToLog:  p.GetAdditionalResponseHeadersToLog(),
		AdditionalResponseTrailersToLog: p.GetAdditionalResponseTrailersToLog(),
	})
	if err != nil {
		return nil, fmt.Errorf("http grpc access log: %w", err)
	}
	return &accesslogv3.AccessLog{Name: HTTPGrpcLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: a}}, nil
}

// tcpALS is the TCP gRPC access log service logger of an envoyTcpAls provider.
func tcpALS(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyTcpGrpcV3LogProvider, clusters clusterLookup) (*accesslogv3.AccessLog, error) {
	common, err := alsCommon(p.GetService(), p.GetPort(), p.GetLogName(), tcpALSLogName, p.GetFilterStateObjectsToLog(), clusters)
	if err != nil {
		return nil, err
	}
	a, err := pack(&grpcalsv3.TcpGrpcAccessLogConfig{CommonConfig: common})
	if err != nil {
		return nil, fmt.Errorf("tcp grpc access log: %w", err)
	}
	return &accesslogv3.AccessLog{Name: TCPGrpcLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: a}}, nil
}

// otelAccessLog is the OpenTelemetry access logger of an envoyOtelAls
// provider: OTLP over gRPC to the provider's service, the body its text
// format (Istio's default when empty), its labels as attributes.
func otelAccessLog(p *meshconfig.MeshConfig_ExtensionProvider_EnvoyOpenTelemetryLogProvider, clusters clusterLookup) (*accesslogv3.AccessLog, error) {
	host, cluster, err := clusters(p.GetService(), p.GetPort())
	if err != nil {
		return nil, err
	}
	name := p.GetLogName()
	if name == "" {
		name = otelLogName
	}
	body := p.GetLogFormat().GetText()
	if body == "" {
		body = DefaultTextFormat
	}
	cfg := &otelalsv3.OpenTelemetryAccessLogConfig{
		CommonConfig: &grpcalsv3.CommonGrpcAccessLogConfig{
			LogName: name,
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host},
			}},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
		Body: &v1.AnyValue{Value: &v1.AnyValue_StringValue{StringValue: body}},
	}
	if labels := p.GetLogFormat().GetLabels(); len(labels.GetFields()) > 0 {
		keys := make([]string, 0, len(labels.GetFields()))
		for k := range labels.GetFields() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		attrs := &v1.KeyValueList{}
		for _, k := range keys {
			attrs.Values = append(attrs.Values, &v1.KeyValue{Key: k,
				Value: &v1.AnyValue{Value: &v1.AnyValue_StringValue{StringValue: labels.GetFields()[k].GetStringValue()}}})
		}
		cfg.Attributes = attrs
	}
	a, err := pack(cfg)
	if err != nil {
		return nil, fmt.Errorf("otel access log: %w", err)
	}
	return &accesslogv3.AccessLog{Name: OTelAccessLogName, ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: a}}, nil
}

// withFilter returns al with a CEL filter on expression (a copy; al is shared).
func withFilter(al *accesslogv3.AccessLog, expression string) (*accesslogv3.AccessLog, error) {
	if expression == "" {
		return al, nil
	}
	cfg, err := pack(&celv3.ExpressionFilter{Expression: expression})
	if err != nil {
		return nil, fmt.Errorf("access log filter: %w", err)
	}
	return &accesslogv3.AccessLog{
		Name:       al.GetName(),
		ConfigType: al.GetConfigType(),
		Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_ExtensionFilter{
			ExtensionFilter: &accesslogv3.ExtensionFilter{Name: celFilterName, ConfigType: &accesslogv3.ExtensionFilter_TypedConfig{TypedConfig: cfg}},
		}},
	}, nil
}

// mergeLogs returns, by provider name, the CEL filter expression of the
// providers that log for mode, from the accessLogging sections of the
// applied specs (widest first) over the mesh's default providers, as
// Istio merges them: a level naming providers replaces the set; a
// disabled entry drops its providers; the last filter of a provider wins.
// ok is false when neither the specs nor the mesh's defaults say anything
// about access logging (then the mesh's accessLogFile applies).
func mergeLogs(specs []*tpb.Telemetry, mesh *meshconfig.MeshConfig, mode tpb.WorkloadMode) (map[string]string, bool) {
	// levels are the accessLogging lists of the levels that have some.
	var levels [][]*tpb.AccessLogging
	for _, s := range specs {
		if len(s.GetAccessLogging()) > 0 {
			levels = append(levels, s.GetAccessLogging())
		}
	}
	defaults := mesh.GetDefaultProviders().GetAccessLogging()
	if len(levels) == 0 && len(defaults) == 0 {
		return nil, false
	}
	out := map[string]string{}
	if len(levels) == 0 {
		for _, p := range defaults {
			out[p] = ""
		}
		return out, true
	}
	inScope := defaults
	filters := map[string]string{}
	for _, level := range levels {
		var names []string
		for _, l := range level {
			ps := providerNames(l.GetProviders())
			names = append(names, ps...)
			for _, p := range ps {
				filters[p] = l.GetFilter().GetExpression()
			}
		}
		if len(names) > 0 {
			inScope = names
		}
	}
	parent := defaults
	for _, level := range levels {
		for _, l := range level {
			names := providerNames(l.GetProviders())
			if len(names) == 0 {
				names = parent
			}
			parent = names
			for _, p := range names {
				if !contains(inScope, p) || !modeMatches(l.GetMatch(), mode) {
					continue
				}
				if l.GetDisabled().GetValue() {
					delete(out, p)
					continue
				}
				out[p] = filters[p]
			}
		}
	}
	return out, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func modeMatches(s *tpb.AccessLogging_LogSelector, mode tpb.WorkloadMode) bool {
	return s == nil || s.GetMode() == tpb.WorkloadMode_CLIENT_AND_SERVER || s.GetMode() == mode
}
