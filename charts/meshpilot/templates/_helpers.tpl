{{/*
meshpilot.name is the base name of the control plane's objects (istiod by default).
*/}}
{{- define "meshpilot.name" -}}
{{- required "name must not be empty" .Values.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
meshpilot.clusterName names cluster-scoped objects, unique per release namespace
(istiod's convention: istiod-clusterrole-istio-system).
*/}}
{{- define "meshpilot.clusterName" -}}
{{- printf "%s-clusterrole-%s" (include "meshpilot.name" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{/*
meshpilot.labels are set on every object the chart renders.
*/}}
{{- define "meshpilot.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: pilot
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
meshpilot.selectorLabels select the discovery pods; istiod's own labels, so
tools that look for app=istiod / istio=pilot find them.
*/}}
{{- define "meshpilot.selectorLabels" -}}
app: {{ include "meshpilot.name" . }}
istio: pilot
{{- end -}}

{{/*
meshpilot.image is HUB/pilot-discovery:TAG, TAG defaulting to appVersion.
*/}}
{{- define "meshpilot.image" -}}
{{- printf "%s/pilot-discovery:%s" (required "image.hub must not be empty" .Values.image.hub) (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
meshpilot.meshConfig is .Values.meshConfig over the release-dependent defaults.
*/}}
{{- define "meshpilot.meshConfig" -}}
{{- $defaults := dict "rootNamespace" .Release.Namespace "defaultConfig" (dict "discoveryAddress" (printf "%s.%s.svc:15012" (include "meshpilot.name" .) .Release.Namespace)) -}}
{{- $mesh := mergeOverwrite $defaults (deepCopy (.Values.meshConfig | default dict)) -}}
{{- toYaml $mesh -}}
{{- end -}}
