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

{{/*
meshpilot.revision is the revision the webhooks select: the revision value,
"default" when it is empty (Istio's label value for the default revision).
*/}}
{{- define "meshpilot.revision" -}}
{{- .Values.revision | default "default" -}}
{{- end -}}

{{/*
meshpilot.revisionSuffix is "-REVISION" for a named revision, "" otherwise,
appended to the webhook configurations' names as Istio does.
*/}}
{{- define "meshpilot.revisionSuffix" -}}
{{- if .Values.revision -}}-{{ .Values.revision }}{{- end -}}
{{- end -}}

{{/*
meshpilot.injectorName is the MutatingWebhookConfiguration's name.
*/}}
{{- define "meshpilot.injectorName" -}}
{{- printf "istio-sidecar-injector%s" (include "meshpilot.revisionSuffix" .) | trunc 253 -}}
{{- end -}}

{{/*
meshpilot.validatorName is the ValidatingWebhookConfiguration's name.
*/}}
{{- define "meshpilot.validatorName" -}}
{{- printf "istio-validator%s-%s" (include "meshpilot.revisionSuffix" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{/*
meshpilot.injectorValues are the values the injection templates read (the
ConfigMap's "values" key), in Istio's layout: global.hub/tag and
global.proxy.image give the injected image. agentImage=meshpilot points them
at this chart's own pilot-agent image.
*/}}
{{- define "meshpilot.injectorValues" -}}
{{- $global := deepCopy .Values.global -}}
{{- if eq .Values.sidecarInjector.agentImage "meshpilot" -}}
{{- $_ := set $global "hub" .Values.image.hub -}}
{{- $_ := set $global "tag" (.Values.image.tag | default .Chart.AppVersion) -}}
{{- $_ := set $global.proxy "image" "pilot-agent" -}}
{{- $_ := set $global.proxy_init "image" "pilot-agent" -}}
{{- else if ne .Values.sidecarInjector.agentImage "proxyv2" -}}
{{- fail (printf "sidecarInjector.agentImage must be proxyv2 or meshpilot, not %q" .Values.sidecarInjector.agentImage) -}}
{{- end -}}
{{- $_ := set $global "istioNamespace" .Release.Namespace -}}
{{- $values := dict "global" $global "revision" .Values.revision "sidecarInjectorWebhook" (dict "rewriteAppHTTPProbe" .Values.sidecarInjector.rewriteAppHTTPProbe) "pilot" (dict "cni" .Values.cni) -}}
{{- toJson $values -}}
{{- end -}}
