{{/* The image the DaemonSet runs: by digest when one is given. */}}
{{- define "vigil.image" -}}
{{ .Values.image.repository }}{{ if .Values.image.digest }}@{{ .Values.image.digest }}{{ else }}:{{ .Values.image.tag }}{{ end }}
{{- end }}
