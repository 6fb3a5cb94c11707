{{- /*
Export of stored runs to Grafana Pyroscope and Parca (docs/exports.md), in the container that
stores runs: SIDECAR_DEBUG_EXPORT carries results.export as JSON (webhook/results/export/
settings.py checks it at start-up), and each sink's existingSecret is mounted read-only at
/etc/sidecar-debug/export/<sink>/. Nothing is rendered while no sink has a url.
*/ -}}
{{- define "sidecar-debug.export.sinks" -}}
{{- $e := (.Values.results | default dict).export | default dict -}}
{{- range $kind := list "pyroscope" "parca" }}
{{- $s := get $e $kind | default dict }}
{{- if and $s.url $s.existingSecret }}{{ $kind }} {{ end }}
{{- end }}
{{- end -}}
{{- define "sidecar-debug.export.env" -}}
{{- $e := (.Values.results | default dict).export | default dict -}}
{{- if or ($e.pyroscope | default dict).url ($e.parca | default dict).url }}
- name: SIDECAR_DEBUG_EXPORT
  value: {{ toJson $e | quote }}
{{- end }}
{{- end -}}
{{- define "sidecar-debug.export.volumeMounts" -}}
{{- range $kind := splitList " " (include "sidecar-debug.export.sinks" . | trim) }}
{{- if $kind }}
- name: export-{{ $kind }}
  mountPath: /etc/sidecar-debug/export/{{ $kind }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}
{{- define "sidecar-debug.export.volumes" -}}
{{- $e := (.Values.results | default dict).export | default dict -}}
{{- range $kind := splitList " " (include "sidecar-debug.export.sinks" . | trim) }}
{{- if $kind }}
- name: export-{{ $kind }}
  secret:
    secretName: {{ (get $e $kind).existingSecret }}
{{- end }}
{{- end }}
{{- end -}}
