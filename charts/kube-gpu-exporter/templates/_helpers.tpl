{{/*
Names, labels and switches shared by the templates, after Helm's own chart scaffold.
*/}}
{{- define "kube-gpu-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-gpu-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The cluster view's name: the full name with -cluster (room kept for the suffix). */}}
{{- define "kube-gpu-exporter.clusterName" -}}
{{- printf "%s-cluster" (include "kube-gpu-exporter.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{- define "kube-gpu-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* Selector labels: immutable in a DaemonSet or Deployment, so no version. (dict "ctx" . "component" C) */}}
{{- define "kube-gpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-gpu-exporter.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kube-gpu-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kube-gpu-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{- define "kube-gpu-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kube-gpu-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kube-gpu-exporter.clusterServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "kube-gpu-exporter.clusterName" . -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image.tag, else the deprecated deployment.image.tag, else the chart's appVersion. */}}
{{- define "kube-gpu-exporter.image" -}}
{{- $old := (.Values.deployment).image | default dict -}}
{{- $repository := .Values.image.repository | default $old.repository -}}
{{- $tag := .Values.image.tag | default $old.tag | default .Chart.AppVersion -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{/*
"true" when a prometheus-operator object is to be rendered: enabled true, or "auto" and the
API server serves its kind. (dict "ctx" . "enabled" E "kind" K)
*/}}
{{- define "kube-gpu-exporter.wanted" -}}
{{- if eq (toString .enabled) "auto" -}}
{{- if .ctx.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) -}}true{{- end -}}
{{- else if .enabled -}}true{{- end -}}
{{- end -}}

{{- define "kube-gpu-exporter.scheme" -}}
{{- if and .Values.webConfig.existingSecret .Values.webConfig.tls -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* The web config's flag, mount and volume, where webConfig.existingSecret is set. */}}
{{- define "kube-gpu-exporter.webConfigArg" -}}
- --web.config.file=/etc/kube-gpu-exporter/web/{{ .Values.webConfig.key }}
{{- end -}}
{{- define "kube-gpu-exporter.webConfigMount" -}}
- name: web-config
  mountPath: /etc/kube-gpu-exporter/web
  readOnly: true
{{- end -}}
{{- define "kube-gpu-exporter.webConfigVolume" -}}
- name: web-config
  secret:
    secretName: {{ .Values.webConfig.existingSecret }}
{{- end -}}

{{/* A probe: the path on the metrics port, the scheme the web config serves, the timing given. (dict "ctx" . "path" P "timing" T) */}}
{{- define "kube-gpu-exporter.probe" -}}
httpGet:
  path: {{ .path }}
  port: metrics
  {{- if eq (include "kube-gpu-exporter.scheme" .ctx) "https" }}
  scheme: HTTPS
  {{- end }}
{{ toYaml .timing }}
{{- end -}}

{{/*
A rendered object (generate's YAML text) with this release's metadata: the body (spec or data)
is printed as generate wrote it, so its quoting (`matchType: "="`) and multi-line strings stay.
(dict "text" T "name" N "namespace" NS "labels" L): a name of "" keeps generate's.
*/}}
{{- define "kube-gpu-exporter.renderedObject" -}}
{{- $obj := .text | fromYaml -}}
{{- $meta := $obj.metadata -}}
{{- if .name }}{{ $_ := set $meta "name" .name }}{{ end -}}
{{- $_ := set $meta "namespace" .namespace -}}
{{- $_ = set $meta "labels" (merge .labels $meta.labels) -}}
apiVersion: {{ $obj.apiVersion }}
kind: {{ $obj.kind }}
metadata:
  {{- toYaml $meta | nindent 2 }}
{{ regexFind "(?ms)^(spec|data):.*" .text | trimSuffix "\n" }}
{{- end -}}
