{{- /*
The results page in the controller pod (issue 13, scheduled profiling). templates/controller.yaml
includes these in its pod spec: resultsContainers after the controller container, resultsVolumes
among the volumes (the `results` volume the controller mounts read-write at
/var/lib/sidecar-debug/results when `results.enabled`), and resultsEnv in the controller's env
(the retention its schedules pass applies). The page container mounts the volume read-only
and serves `sidecar-debug results serve` on results.page.port (templates/results.yaml: Service).
*/ -}}
{{- define "sidecar-debug.resultsClaimName" -}}
{{- $p := (.Values.results | default dict).persistence | default dict -}}
{{- $p.existingClaim | default (include "sidecar-debug.suffixedName" (dict "root" . "suffix" "results")) -}}
{{- end -}}
{{- define "sidecar-debug.controller.resultsContainers" -}}
{{- $r := .Values.results | default dict -}}
{{- if $r.enabled -}}
- name: results
  image: {{ include "sidecar-debug.webhookImage" . | quote }}
  imagePullPolicy: {{ .Values.webhook.image.pullPolicy }}
  command:
    - sidecar-debug
    - results
    - serve
    - --dir
    - /var/lib/sidecar-debug/results
    - --port
    - {{ $r.page.port | quote }}
  ports:
    - name: results
      containerPort: {{ $r.page.port }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /healthz
      port: results
    periodSeconds: 10
    timeoutSeconds: 3
  livenessProbe:
    httpGet:
      path: /healthz
      port: results
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 3
  resources:
    {{- toYaml $r.page.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.webhook.securityContext | nindent 4 }}
  volumeMounts:
    - name: results
      mountPath: /var/lib/sidecar-debug/results
      readOnly: true
{{- end }}
{{- end -}}
{{- define "sidecar-debug.controller.resultsVolumes" -}}
{{- $r := .Values.results | default dict -}}
{{- if $r.enabled -}}
- name: results
  {{- if $r.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "sidecar-debug.resultsClaimName" . }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ $r.persistence.size | quote }}
  {{- end }}
{{- include "sidecar-debug.export.volumes" . }}
{{- end }}
{{- end -}}
{{- define "sidecar-debug.controller.resultsEnv" -}}
{{- $r := .Values.results | default dict -}}
{{- if $r.enabled -}}
- name: SIDECAR_DEBUG_RESULTS_KEEP
  value: {{ $r.retention.count | quote }}
- name: SIDECAR_DEBUG_RESULTS_MAX_AGE
  value: {{ $r.retention.maxAge | quote }}
{{- include "sidecar-debug.export.env" . }}
{{- end }}
{{- end -}}
