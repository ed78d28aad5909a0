{{/* Same definition as "hami.base" in the umbrella chart (tests/deploy checks they agree). */}}
{{- define "hami-scheduler.base" -}}
{{- if .Values.global.fullnameOverride -}}
{{- .Values.global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "hami" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-hami" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami-scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "hami-scheduler.base" .) -}}
{{- end -}}

{{- define "hami-scheduler.deviceConfig" -}}
{{- printf "%s-device-config" (include "hami-scheduler.base" .) -}}
{{- end -}}

{{- define "hami-scheduler.tlsSecret" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "hami-scheduler.fullname" .)) -}}
{{- end -}}

{{- define "hami-scheduler.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "hami-scheduler.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "hami-scheduler.selectorLabels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{- define "hami-scheduler.labels" -}}
{{ include "hami-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hami
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "hami-scheduler.image" -}}
{{- $tag := .Values.image.tag | default .Values.global.imageTag | default .Chart.AppVersion -}}
{{- if .Values.global.imageRegistry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .Values.global.imageRegistry) .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* kube-scheduler's tag: the value, else the cluster's v<major>.<minor>.<patch>. */}}
{{- define "hami-scheduler.kubeSchedulerImage" -}}
{{- $tag := .Values.kubeScheduler.image.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- printf "%s:%s" .Values.kubeScheduler.image.repository $tag -}}
{{- end -}}

{{/* nodeLabelSelector as the extender's k=v,k2=v2 flag value. */}}
{{- define "hami-scheduler.nodeLabelSelector" -}}
{{- $pairs := list -}}
{{- range $key, $value := .Values.nodeLabelSelector -}}
{{- $pairs = append $pairs (printf "%s=%s" $key (toString $value)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- define "hami-scheduler.metricsPort" -}}
{{- .Values.metricsBindAddress | splitList ":" | last -}}
{{- end -}}
