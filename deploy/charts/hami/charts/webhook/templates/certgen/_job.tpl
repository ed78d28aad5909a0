{{/*
One certificate Job. Arguments: dict "root" $ "suffix" "create|patch" "hook" "<helm hooks>"
"args" (list ...).
*/}}
{{- define "hami-webhook.certJob" -}}
{{- $root := .root -}}
{{- $values := $root.Values.patch -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "hami-webhook.fullname" $root }}-certgen-{{ .suffix }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "hami-webhook.labels" $root | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: "-5"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 6
  ttlSecondsAfterFinished: 600
  template:
    metadata:
      labels:
        # Not the webhook's selector labels: the Service must not send reviews to these pods.
        app.kubernetes.io/name: hami
        app.kubernetes.io/instance: {{ $root.Release.Name }}
        app.kubernetes.io/component: webhook-certgen
        hami.io/webhook: ignore
      {{- with $values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "hami-webhook.fullname" $root }}-certgen
      restartPolicy: OnFailure
      {{- with $values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $root.Values.global.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: certgen
          image: {{ $values.image.repository }}:{{ $values.image.tag }}
          imagePullPolicy: {{ $values.image.pullPolicy }}
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $values.securityContext | nindent 12 }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
