{{/* The name of every object of a release. */}}
{{- define "kvtier.fullname" -}}
{{- printf "%s-kvtier" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvtier.labels" -}}
app.kubernetes.io/name: {{ include "kvtier.fullname" . }}
app.kubernetes.io/part-of: kvtier
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kvtier.selector" -}}
app.kubernetes.io/name: {{ include "kvtier.fullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvtier.tokenSecret" -}}
{{- .Values.adminToken.existingSecret | default (printf "%s-admin-token" (include "kvtier.fullname" .)) -}}
{{- end -}}

{{/* The sidecar's memory: l1Size (GiB) plus memoryOverhead. */}}
{{- define "kvtier.memory" -}}
{{- if not (hasSuffix "GiB" .Values.kvtierd.l1Size) -}}
{{- fail "kvtierd.l1Size must be given in GiB (\"64GiB\")" -}}
{{- end -}}
{{- $l1 := .Values.kvtierd.l1Size | trimSuffix "GiB" | int -}}
{{- $extra := .Values.kvtierd.memoryOverhead | trimSuffix "Gi" | int -}}
{{- printf "%dGi" (add $l1 $extra) -}}
{{- end -}}

{{/* vLLM's --kv-transfer-config for the kvtier connector (docs/vllm.md). */}}
{{- define "kvtier.connectorConfig" -}}
{{- dict "kv_connector" "KvtierConnector" "kv_connector_module_path" "kvtier.vllm" "kv_role" "kv_both" "kv_load_failure_policy" "recompute" "kv_connector_extra_config" (dict "socket_path" "/run/kvtier/kvtierd.sock" "staging_kind" (ternary "ipc" "vmm" (eq .Values.staging.kind "cuda_ipc"))) | toJson -}}
{{- end -}}
