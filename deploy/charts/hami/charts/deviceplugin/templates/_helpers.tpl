{{/* Same definition as "hami.base" in the umbrella chart (tests/deploy checks they agree). */}}
{{- define "hami-deviceplugin.base" -}}
{{- if .Values.global.fullnameOverride -}}
{{- .Values.global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "hami" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-hami" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami-deviceplugin.fullname" -}}
{{- printf "%s-device-plugin" (include "hami-deviceplugin.base" .) -}}
{{- end -}}

{{- define "hami-deviceplugin.deviceConfig" -}}
{{- printf "%s-device-config" (include "hami-deviceplugin.base" .) -}}
{{- end -}}

{{- define "hami-deviceplugin.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "hami-deviceplugin.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "hami-deviceplugin.selectorLabels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: device-plugin
{{- end -}}

{{- define "hami-deviceplugin.labels" -}}
{{ include "hami-deviceplugin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hami
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hami-deviceplugin.image" -}}
{{- $tag := .Values.image.tag | default .Values.global.imageTag | default .Chart.AppVersion -}}
{{- if .Values.global.imageRegistry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .Values.global.imageRegistry) .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}
