{{- /*
The results service (issue 19): its names, where the toolsets reach it, the audience their
projected tokens are bound to, and where its serving certificate comes from in each
certificates mode. The results-*.yaml templates render the workload; the webhook's settings
(resultsUrl, resultsAudience, resultsServiceName) come from here too.
*/ -}}
{{- define "sidecar-debug.resultsName" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "results") -}}
{{- end -}}
{{- define "sidecar-debug.resultsSelectorLabels" -}}
app.kubernetes.io/name: {{ include "sidecar-debug.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: results
{{- end -}}
{{- define "sidecar-debug.resultsClaimName" -}}
{{- $p := (.Values.results | default dict).persistence | default dict -}}
{{- $p.existingClaim | default (include "sidecar-debug.resultsName" .) -}}
{{- end -}}
{{- define "sidecar-debug.resultsUrl" -}}
{{- printf "https://%s.%s.svc:%v" (include "sidecar-debug.resultsName" .) .Release.Namespace .Values.results.service.port -}}
{{- end -}}
{{- /* The audience names this release's service: a token for another release's (or for the
apiserver) is refused, and ours is good for nothing else. */ -}}
{{- define "sidecar-debug.resultsAudience" -}}
{{- .Values.results.audience | default (printf "sidecar-debug.io/results/%s/%s" .Release.Namespace (include "sidecar-debug.resultsName" .)) -}}
{{- end -}}
{{- /* The Secret the results pod serves from: the webhook's own (self mode: the webhook issues
results.crt/results.key from its CA), cert-manager's Certificate for it, or yours. */ -}}
{{- define "sidecar-debug.resultsTlsSecretName" -}}
{{- $mode := .Values.certificates.mode -}}
{{- if eq $mode "self" -}}
{{- include "sidecar-debug.tlsSecretName" . -}}
{{- else if eq $mode "certManager" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "results-tls") -}}
{{- else -}}
{{- required "results.tls.secretName: with certificates.mode provided, name the results service's TLS Secret (tls.crt, tls.key and ca.crt, its CA; the certificate names <fullname>-results.<namespace>.svc)" .Values.results.tls.secretName -}}
{{- end -}}
{{- end -}}
