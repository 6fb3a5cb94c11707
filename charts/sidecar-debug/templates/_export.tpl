{{- /*
Export of stored runs to Grafana Pyroscope, Parca and OpenTelemetry (OTLP profiles) (docs/exports.md), in the container that
stores runs (templates/results-deployment.yaml, the results service): SIDECAR_DEBUG_EXPORT carries
results.export as JSON (webhook/results/export/settings.py checks it at start-up), and each
sink's existingSecret is mounted read-only at /etc/sidecar-debug/export/<sink>/; with
networkPolicy.enabled, the results NetworkPolicy lets it out to each sink's URL port (to
results.export.egressTo, or anywhere). Nothing is rendered while no sink has a url.
*/ -}}
{{- define "sidecar-debug.export.sinks" -}}
{{- $e := (.Values.results | default dict).export | default dict -}}
{{- range $kind := list "pyroscope" "parca" "otlp" }}
{{- $s := get $e $kind | default dict }}
{{- if and $s.url $s.existingSecret }}{{ $kind }} {{ end }}
{{- end }}
{{- end -}}
{{- define "sidecar-debug.export.env" -}}
{{- $e := (.Values.results | default dict).export | default dict -}}
{{- $otlp := $e.otlp | default dict -}}
{{- if and $otlp.url (eq ($otlp.protocol | default "") "grpc") (not (has (urlParse $otlp.url).path (list "" "/"))) }}
{{- fail (printf "results.export.otlp.url: a gRPC endpoint is host and port only (https://collector:4317 for TLS, http://collector:4317 for plaintext), got the path %q" (urlParse $otlp.url).path) }}
{{- end }}
{{- if or ($e.pyroscope | default dict).url ($e.parca | default dict).url ($e.otlp | default dict).url }}
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
{{- define "sidecar-debug.export.egress" -}}
{{- $e := (.Values.results | default dict).export | default dict -}}
{{- $ports := list -}}
{{- range $kind := list "pyroscope" "parca" "otlp" }}
{{- $url := (get $e $kind | default dict).url }}
{{- if $url }}
{{- $u := urlParse $url }}
{{- $hostPort := splitList ":" $u.host }}
{{- $port := ternary (last $hostPort) (ternary "443" "80" (eq $u.scheme "https")) (gt (len $hostPort) 1) }}
{{- $ports = append $ports $port }}
{{- end }}
{{- end }}
{{- if $ports }}
- ports:
    {{- range uniq $ports }}
    - port: {{ int . }}
      protocol: TCP
    {{- end }}
  {{- with $e.egressTo }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}
