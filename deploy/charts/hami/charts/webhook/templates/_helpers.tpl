{{/* Same definition as "hami.base" in the umbrella chart (tests/deploy checks they agree). */}}
{{- define "hami-webhook.base" -}}
{{- if .Values.global.fullnameOverride -}}
{{- .Values.global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "hami" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-hami" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami-webhook.fullname" -}}
{{- printf "%s-webhook" (include "hami-webhook.base" .) -}}
{{- end -}}

{{- define "hami-webhook.deviceConfig" -}}
{{- printf "%s-device-config" (include "hami-webhook.base" .) -}}
{{- end -}}

{{- define "hami-webhook.tlsSecret" -}}
{{- printf "%s-tls" (include "hami-webhook.fullname" .) -}}
{{- end -}}

{{- define "hami-webhook.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "hami-webhook.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* DNS names the serving certificate must carry. */}}
{{- define "hami-webhook.hosts" -}}
{{- $svc := include "hami-webhook.fullname" . -}}
{{- $hosts := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) -}}
{{- if .Values.admissionWebhook.customURL.enabled -}}
{{- $hosts = append $hosts .Values.admissionWebhook.customURL.host -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}

{{- define "hami-webhook.selectorLabels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "hami-webhook.labels" -}}
{{ include "hami-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hami
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hami-webhook.image" -}}
{{- $tag := .Values.image.tag | default .Values.global.imageTag | default .Chart.AppVersion -}}
{{- if .Values.global.imageRegistry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .Values.global.imageRegistry) .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Certificates come from the hook Jobs (default) or cert-manager. */}}
{{- define "hami-webhook.useCertJobs" -}}
{{- if and .Values.patch.enabled (not .Values.certManager.enabled) -}}true{{- end -}}
{{- end -}}
