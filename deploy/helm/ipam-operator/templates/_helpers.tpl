{{/*
An image reference from {repository, tag, digest}: REPOSITORY:TAG,
REPOSITORY@DIGEST or REPOSITORY:TAG@DIGEST; the tag defaults to the chart's
appVersion unless a digest alone is given.
Call with (dict "image" .Values.image "chart" .Chart).
*/}}
{{- define "ipam-operator.image" -}}
{{- $tag := .image.tag | default (ternary "" .chart.AppVersion (ne .image.digest "")) -}}
{{- .image.repository -}}
{{- with $tag }}:{{ . }}{{ end -}}
{{- with .image.digest }}@{{ . }}{{ end -}}
{{- end }}

{{/* The cloud the provider talks to: provider.cloud, else the provider's own. */}}
{{- define "ipam-operator.cloud" -}}
{{- $byName := dict "aws" "aws" "azure" "azure" -}}
{{- .Values.provider.cloud | default (get $byName .Values.provider.name) | default "generic" -}}
{{- end }}

{{/* The agent's cloud: agent.cloud, else the operator's (generic: none). */}}
{{- define "ipam-operator.agentCloud" -}}
{{- $cloud := include "ipam-operator.cloud" . -}}
{{- .Values.agent.cloud | default (ternary "none" $cloud (eq $cloud "generic")) -}}
{{- end }}

{{/* "true" when the kvstore duties are on (etcd endpoints or an etcd config). */}}
{{- define "ipam-operator.kvstoreOn" -}}
{{- if or .Values.kvstore.endpoints .Values.kvstore.etcdConfig.configMap -}}true{{- end -}}
{{- end }}

{{/*
Environment variables for settings left out while empty: call with a list
of (list NAME VALUE) pairs; 0 and false are values, "" is not.
*/}}
{{- define "ipam-operator.optionalEnv" -}}
{{- range . }}
{{- if ne (toString (index . 1)) "" }}
- name: {{ index . 0 }}
  value: {{ index . 1 | toString | quote }}
{{- end }}
{{- end }}
{{- end }}
