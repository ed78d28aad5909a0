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
{{ include "hami-deviceplugin.commonLabels" . }}
{{- end -}}

{{/* The monitor Service's own labels: not the plugin's component, so the plugin's
ServiceMonitor (which scrapes the monitor through the headless Service) does not select it. */}}
{{- define "hami-deviceplugin.monitorLabels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: vgpu-monitor
{{ include "hami-deviceplugin.commonLabels" . }}
{{- end -}}

{{- define "hami-deviceplugin.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hami
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* HOOK_PATH of the monitor: HAMi-core's directory, <global.gpuHookPath>/vgpu. */}}
{{- define "hami-deviceplugin.monitorHookPath" -}}
{{- printf "%s/vgpu" (trimSuffix "/" .Values.global.gpuHookPath) -}}
{{- end -}}

{{- define "hami-deviceplugin.image" -}}
{{- $tag := .Values.image.tag | default .Values.global.imageTag | default .Chart.AppVersion -}}
{{- if .Values.global.imageRegistry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .Values.global.imageRegistry) .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Pod labels of the DRA DaemonSet: another component, so that neither DaemonSet's selector
(immutable) nor the device-plugin Services select the other's pods. */}}
{{- define "hami-deviceplugin.draSelectorLabels" -}}
app.kubernetes.io/name: hami
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: device-plugin-dra
{{- end -}}

{{/* The device-plugin DaemonSet's affinity with the DRA nodes left out: a node is a DRA node
when it carries every label of dra.nodeSelector, so the plugin runs where any one differs
(one NotIn term per label; terms are ORed). Each term of a required node affinity given in
values is combined with each of those. */}}
{{- define "hami-deviceplugin.notOnDraNodes" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- $node := get $affinity "nodeAffinity" | default dict -}}
{{- $required := get $node "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := get $required "nodeSelectorTerms" | default (list dict) -}}
{{- $out := list -}}
{{- range $term := $terms -}}
{{- range $key, $value := $.Values.dra.nodeSelector -}}
{{- $expressions := get $term "matchExpressions" | default list -}}
{{- $notDra := dict "key" $key "operator" "NotIn" "values" (list (toString $value)) -}}
{{- $out = append $out (merge (dict "matchExpressions" (append $expressions $notDra)) (omit $term "matchExpressions")) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $out -}}
{{- $_ = set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ = set $affinity "nodeAffinity" $node -}}
{{- toYaml $affinity -}}
{{- end -}}
