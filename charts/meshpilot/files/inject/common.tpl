{{- /* Named templates shared by meshpilot's injection templates. The chart
prepends this file to each of them (templates/injector-configmap.yaml), so
every template in ConfigMap istio-sidecar-injector stands alone, as
pilot-discovery and istiod parse each on its own. Data:
pilot/webhook/inject.TemplateData. Output matches what Istio's own templates
give (test/helm TestChartTemplatesMatchIstio). */ -}}

{{- /* mp.resources: the proxy's resources. Any of the four
sidecar.istio.io/proxy{CPU,Memory}[Limit] annotations replaces the chart's
global.proxy.resources wholesale. */ -}}
{{- define "mp.resources" -}}
{{- $a := .ObjectMeta.Annotations -}}
{{- $req := dict -}}
{{- $lim := dict -}}
{{- with index $a `sidecar.istio.io/proxyCPU` }}{{ $_ := set $req "cpu" . }}{{ end -}}
{{- with index $a `sidecar.istio.io/proxyMemory` }}{{ $_ := set $req "memory" . }}{{ end -}}
{{- with index $a `sidecar.istio.io/proxyCPULimit` }}{{ $_ := set $lim "cpu" . }}{{ end -}}
{{- with index $a `sidecar.istio.io/proxyMemoryLimit` }}{{ $_ := set $lim "memory" . }}{{ end -}}
{{- if or $req $lim -}}
{{- $r := dict -}}
{{- if $req }}{{ $_ := set $r "requests" $req }}{{ end -}}
{{- if $lim }}{{ $_ := set $r "limits" $lim }}{{ end -}}
{{ toRawJson $r }}
{{- else -}}
{{ toRawJson (omitNil (.Values.global.proxy.resources | default dict)) }}
{{- end -}}
{{- end -}}

{{- /* mp.appContainers: the pod's container names but istio-proxy,
comma-separated and quoted. */ -}}
{{- define "mp.appContainers" -}}
{{- $names := list -}}
{{- range .Spec.Containers }}{{ if ne .Name "istio-proxy" }}{{ $names = append $names .Name }}{{ end }}{{ end -}}
{{ join "," $names | quote }}
{{- end -}}

{{- /* mp.podPorts: ISTIO_META_POD_PORTS, the containers' ports as a JSON
array, one per line as Istio writes it, quoted. */ -}}
{{- define "mp.podPorts" -}}
{{- $ports := list -}}
{{- range .Spec.Containers }}{{ range .Ports }}{{ with structToJSON . }}{{ $ports = append $ports . }}{{ end }}{{ end }}{{ end -}}
{{- if $ports }}{{ printf "[\n    %s\n]" (join "\n    ," $ports) | quote }}{{ else }}{{ "[\n]" | quote }}{{ end -}}
{{- end -}}

{{- /* mp.canonicalLabels: service.istio.io/canonical-{name,revision}. */ -}}
{{- define "mp.canonicalLabels" -}}
{{- $l := .ObjectMeta.Labels -}}
    service.istio.io/canonical-name: {{ coalesce (index $l `service.istio.io/canonical-name`) (index $l `app.kubernetes.io/name`) (index $l `app`) .DeploymentMeta.Name | trunc 63 | trimAll "-_." | quote }}
    service.istio.io/canonical-revision: {{ coalesce (index $l `service.istio.io/canonical-revision`) (index $l `app.kubernetes.io/version`) (index $l `version`) "latest" | quote }}
{{- end -}}

{{- /* mp.defaultContainer: kubectl's default-container annotations, naming
the first application container unless the pod names one. */ -}}
{{- define "mp.defaultContainer" -}}
{{- $first := "" -}}
{{- range .Spec.Containers }}{{ if and (not $first) (ne .Name "istio-proxy") }}{{ $first = .Name }}{{ end }}{{ end -}}
{{- if $first -}}
{{- if not (isset .ObjectMeta.Annotations `kubectl.kubernetes.io/default-logs-container`) }}
    kubectl.kubernetes.io/default-logs-container: {{ $first | quote }}
{{- end }}
{{- if not (isset .ObjectMeta.Annotations `kubectl.kubernetes.io/default-container`) }}
    kubectl.kubernetes.io/default-container: {{ $first | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{- /* mp.agentArgs: pilot-agent's flags after "proxy sidecar|router". */ -}}
{{- define "mp.agentArgs" -}}
{{- $g := .Values.global -}}
{{- $a := .ObjectMeta -}}
    - --domain
    - {{ printf "$(POD_NAMESPACE).svc.%s" (valueOrDefault $g.proxy.clusterDomain "cluster.local") | quote }}
    - {{ printf "--proxyLogLevel=%s" (annotation $a `sidecar.istio.io/logLevel` $g.proxy.logLevel) | quote }}
    - {{ printf "--proxyComponentLogLevel=%s" (annotation $a `sidecar.istio.io/componentLogLevel` $g.proxy.componentLogLevel) | quote }}
    - {{ printf "--log_output_level=%s" (annotation $a `sidecar.istio.io/agentLogLevel` $g.logging.level) | quote }}
{{- with ($g.sts).servicePort }}
    - {{ printf "--stsPort=%v" . | quote }}
{{- end }}
{{- if $g.logAsJson }}
    - --log_as_json
{{- end }}
{{- end -}}

{{- /* mp.caAddr: where the agent gets certificates (CA_ADDR), quoted:
global.caAddress, else the proxy's discoveryAddress. Istio's templates
compute istiod[-REVISION].NAMESPACE.svc:15012 instead; the chart puts its
own Service there (defaultConfig.discoveryAddress), whatever its name. */ -}}
{{- define "mp.caAddr" -}}
{{- .Values.global.caAddress | default .ProxyConfig.DiscoveryAddress | quote -}}
{{- end -}}

{{- /* mp.podEnv: the downward-API variables every agent reads. */ -}}
{{- define "mp.podEnv" -}}
{{- range list (list "POD_NAME" "metadata.name") (list "POD_NAMESPACE" "metadata.namespace") (list "INSTANCE_IP" "status.podIP") (list "SERVICE_ACCOUNT" "spec.serviceAccountName") (list "HOST_IP" "status.hostIP") }}
    - name: {{ index . 0 }}
      valueFrom:
        fieldRef: {fieldPath: {{ index . 1 }}}
{{- end }}
{{- end -}}

{{- /* mp.workloadEnv: workload name and owner, mesh ID and trust domain. */ -}}
{{- define "mp.workloadEnv" -}}
{{- $g := .Values.global -}}
{{- with index .ObjectMeta.Labels `service.istio.io/workload-name` | default .DeploymentMeta.Name }}
    - name: ISTIO_META_WORKLOAD_NAME
      value: {{ . | quote }}
{{- end }}
{{- if and .TypeMeta.APIVersion .DeploymentMeta.Name }}
    - name: ISTIO_META_OWNER
      value: {{ printf "kubernetes://apis/%s/namespaces/%s/%ss/%s" .TypeMeta.APIVersion (valueOrDefault .DeploymentMeta.Namespace "default") (toLower .TypeMeta.Kind) .DeploymentMeta.Name | quote }}
{{- end }}
{{- if (isset .ObjectMeta.Annotations `sidecar.istio.io/bootstrapOverride`) }}
    - name: ISTIO_BOOTSTRAP_OVERRIDE
      value: /etc/istio/custom-bootstrap/custom_bootstrap.json
{{- end }}
{{- $trustDomain := valueOrDefault .MeshConfig.TrustDomain $g.trustDomain -}}
{{- with $g.meshID | default $trustDomain }}
    - name: ISTIO_META_MESH_ID
      value: {{ . | quote }}
{{- end }}
{{- with $trustDomain }}
    - name: TRUST_DOMAIN
      value: {{ . | quote }}
{{- end }}
{{- end -}}

{{- /* mp.proxyMetadata: ProxyConfig.proxyMetadata as variables. */ -}}
{{- define "mp.proxyMetadata" -}}
{{- range $k, $v := .ProxyConfig.ProxyMetadata }}
    - name: {{ $k | quote }}
      value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{- /* mp.readiness: istio-proxy's readinessProbe on port. */ -}}
{{- define "mp.readiness" -}}
{{- $a := .root.ObjectMeta -}}
{{- $p := .root.Values.global.proxy -}}
    readinessProbe:
      httpGet:
        path: /healthz/ready
        port: {{ .port }}
      initialDelaySeconds: {{ annotation $a `readiness.status.sidecar.istio.io/initialDelaySeconds` ($p.readinessInitialDelaySeconds | default 0) | int64 }}
      periodSeconds: {{ annotation $a `readiness.status.sidecar.istio.io/periodSeconds` ($p.readinessPeriodSeconds | default 15) | int64 }}
      timeoutSeconds: 3
      failureThreshold: {{ annotation $a `readiness.status.sidecar.istio.io/failureThreshold` ($p.readinessFailureThreshold | default 4) | int64 }}
{{- end -}}

{{- /* mp.userVolumeMounts / mp.userVolumes: the pod's
sidecar.istio.io/userVolumeMount and userVolume annotations (JSON objects
keyed by volume name). */ -}}
{{- define "mp.userVolumeMounts" -}}
{{- with index .ObjectMeta.Annotations `sidecar.istio.io/userVolumeMount` }}
{{- range $name, $m := fromJSON . }}
    - {{ toRawJson (merge (dict "name" $name) $m) }}
{{- end }}
{{- end }}
{{- end -}}
{{- define "mp.userVolumes" -}}
{{- with index .ObjectMeta.Annotations `sidecar.istio.io/userVolume` }}
{{- range $name, $v := fromJSON . }}
  - {{ toRawJson (merge (dict "name" $name) $v) }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* mp.trustVolumes: the mesh's root certificate and, with
mountMtlsCerts, the legacy istio.<service account> secret. */ -}}
{{- define "mp.trustVolumes" -}}
{{- $g := .Values.global -}}
{{- if eq $g.pilotCertProvider "istiod" }}
  - name: istiod-ca-cert
{{- if eq ((.Values.pilot).env).ENABLE_CLUSTER_TRUST_BUNDLE_API true }}
    projected:
      sources:
      - clusterTrustBundle:
          name: {{ printf "istio.io:istiod-ca:%s" ($g.trustBundleName | default "root-cert") | quote }}
          path: root-cert.pem
{{- else }}
    configMap:
      name: {{ $g.trustBundleName | default "istio-ca-root-cert" | quote }}
{{- end }}
{{- end }}
{{- if $g.mountMtlsCerts }}
  - name: istio-certs
    secret:
      optional: true
      secretName: {{ printf "istio.%s" (.Spec.ServiceAccountName | default "default") | quote }}
{{- end }}
{{- end -}}

{{- /* mp.podInfoVolumes: the agent's data directory, its pod-info and its
projected token. */ -}}
{{- define "mp.podInfoVolumes" -}}
  - name: istio-data
    emptyDir: {}
  - name: istio-podinfo
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: annotations, fieldRef: {fieldPath: metadata.annotations}}
  - name: istio-token
    projected:
      sources:
      - serviceAccountToken:
          path: istio-token
          expirationSeconds: 43200
          audience: {{ ((.Values.global.sds).token).aud | default "istio-ca" | quote }}
{{- end -}}

{{- /* mp.certVolume / mp.certMount: where workload certificates land
(a GKE workload-certificate CSI volume when global.caName says so). A
volume without a source is an emptyDir by the API server's defaulting;
Istio's pods carry it that way, and so do ours. */ -}}
{{- define "mp.certVolume" -}}
{{- if eq .Values.global.caName "GkeWorkloadCertificate" }}
  - name: gke-workload-certificate
    csi:
      driver: workloadcertificates.security.cloud.google.com
{{- else }}
  - name: workload-certs
{{- end }}
{{- end -}}
{{- define "mp.certMount" -}}
{{- if eq .Values.global.caName "GkeWorkloadCertificate" }}
    - {name: gke-workload-certificate, mountPath: /var/run/secrets/workload-spiffe-credentials, readOnly: true}
{{- else }}
    - {name: workload-certs, mountPath: /var/run/secrets/workload-spiffe-credentials}
{{- end }}
{{- end -}}

{{- /* mp.imagePullSecrets: global.imagePullSecrets, by name. */ -}}
{{- define "mp.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
  imagePullSecrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}
