{{/* Chart name, overridable. */}}
{{- define "ac.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified prefix of every object name. */}}
{{- define "ac.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "ac.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: agent-computer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of the operator pods. */}}
{{- define "ac.operator.selector" -}}
app.kubernetes.io/name: agentcomputer-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of the node-agent pods; the operator finds agents by the name label. */}}
{{- define "ac.agent.selector" -}}
app.kubernetes.io/name: agentcomputer-node-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Selector labels of the mounter pods (not the agent's name: the operator
finds node agents by that). */}}
{{- define "ac.mounter.selector" -}}
app.kubernetes.io/name: agentcomputer-mounter
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Host directories of the node side, all under nodeAgent.hostDir. */}}
{{- define "ac.dataDir" -}}{{ .Values.nodeAgent.hostDir }}/data{{- end -}}
{{- define "ac.runDir" -}}{{ .Values.nodeAgent.hostDir }}/run{{- end -}}
{{- define "ac.handoverSocket" -}}{{ include "ac.runDir" . }}/mounter.sock{{- end -}}

{{/* Node placement shared by both DaemonSets: a node needs both parts. */}}
{{- define "ac.nodePlacement" -}}
{{- with .Values.nodeAgent.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeAgent.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Image reference: registry/repository:tag. */}}
{{- define "ac.image" -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .repository (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{/* Selector labels of the share-link gateway pods. */}}
{{- define "ac.gateway.selector" -}}
app.kubernetes.io/name: agentcomputer-share-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Path of nodeAgent.share.url (what the gateway routes below). */}}
{{- define "ac.share.basePath" -}}
{{- $path := (urlParse .Values.nodeAgent.share.url).path -}}
{{- if $path }}{{ $path }}{{ else }}/{{ end -}}
{{- end -}}

{{/* Selector labels of the API gateway's pods. */}}
{{- define "ac.apiGateway.selector" -}}
app.kubernetes.io/name: agentcomputer-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The API gateway's address as clients use it: gateway.url, else the
Ingress host, else the Service's in the cluster. */}}
{{- define "ac.apiGateway.url" -}}
{{- if .Values.gateway.url -}}
{{ .Values.gateway.url }}
{{- else if and .Values.gateway.ingress.enabled .Values.gateway.ingress.host -}}
{{ if .Values.gateway.ingress.tlsSecretName }}https{{ else }}http{{ end }}://{{ .Values.gateway.ingress.host }}
{{- else -}}
{{ if .Values.gateway.tls.secretName }}https{{ else }}http{{ end }}://{{ include "ac.fullname" . }}-gateway.{{ .Release.Namespace }}.svc:{{ .Values.gateway.service.port }}
{{- end -}}
{{- end -}}
