{{/*
Base name shared by every object of the release: <release>-hami (or the release name when it
already says "hami", or global.fullnameOverride). The same definition is repeated, under each
chart's own prefix, in the three subcharts: template names are global in Helm, and each chart must
also render on its own (`helm lint --with-subcharts`). tests/deploy checks the copies agree.
*/}}
{{- define "hami.base" -}}
{{- if .Values.global.fullnameOverride -}}
{{- .Values.global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "hami" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-hami" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami.labels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hami
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
