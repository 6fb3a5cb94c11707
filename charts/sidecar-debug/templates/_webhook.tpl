{{/* The admission webhooks' shared parts (rules, client configs, the guard's and the
namespace gate's entries), used by webhook-mutating-webhook.yaml and
webhook-validating-webhook.yaml: the templates render objects, the helpers live here. */}}
{{- define "sidecar-debug.mutatingWebhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ .failurePolicy | default .root.Values.webhook.failurePolicy }}
timeoutSeconds: {{ .root.Values.webhook.timeoutSeconds }}
# The webhook's patch is idempotent (status annotation), so it may run again after later webhooks.
reinvocationPolicy: IfNeeded
matchPolicy: Equivalent
{{- end -}}
{{- define "sidecar-debug.podRules" -}}
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
    scope: Namespaced
{{- end -}}
{{- define "sidecar-debug.webhookClientConfig" -}}
clientConfig:
  service:
    name: {{ include "sidecar-debug.serviceName" . }}
    namespace: {{ .Release.Namespace }}
    path: /mutate
    port: {{ .Values.service.port }}
  {{- if eq .Values.certificates.mode "provided" }}
  caBundle: {{ .Values.certificates.provided.caBundle }}
  {{- end }}
{{- end -}}
{{- define "sidecar-debug.validatingClientConfig" -}}
clientConfig:
  service:
    name: {{ include "sidecar-debug.serviceName" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ .root.Values.service.port }}
  {{- if eq .root.Values.certificates.mode "provided" }}
  caBundle: {{ .root.Values.certificates.provided.caBundle }}
  {{- end }}
{{- end -}}
{{- define "sidecar-debug.guardEntry" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
# Fail closed: while the guard cannot answer, nothing is created or changed in a guarded
# namespace (whose Pod Security may be relaxed for the debug sidecar); other namespaces are
# never sent here.
failurePolicy: Fail
timeoutSeconds: {{ .Values.guard.timeoutSeconds }}
matchPolicy: Equivalent
# Pods as created (after every mutating webhook: validating webhooks run last) and changed,
# ephemeral containers added to running pods, and status writes (which may change metadata:
# the annotations the webhook owns, seccomp and AppArmor annotations).
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["pods"]
    scope: Namespaced
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["UPDATE"]
    resources: ["pods/ephemeralcontainers", "pods/status"]
    scope: Namespaced
{{ include "sidecar-debug.validatingClientConfig" (dict "root" . "path" "/validate-pods") }}
{{- end -}}
{{- define "sidecar-debug.namespaceEntry" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
failurePolicy: {{ .failurePolicy }}
timeoutSeconds: {{ .timeoutSeconds }}
matchPolicy: Equivalent
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["namespaces"]
    scope: Cluster
{{- with include "sidecar-debug.namespaceExclusion" .root }}
namespaceSelector:
  matchExpressions:
    {{- . | nindent 4 }}
{{- end }}
{{ include "sidecar-debug.validatingClientConfig" (dict "root" .root "path" .path) }}
{{- end -}}
