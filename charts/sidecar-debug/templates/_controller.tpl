{{- /*
The expiry controller (`sidecar-debug controller`, issue 13): its names. Its ServiceAccount, roles
and Deployment are the controller-*.yaml templates.
*/ -}}
{{- define "sidecar-debug.controllerServiceAccountName" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "controller") -}}
{{- end -}}
{{- define "sidecar-debug.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "sidecar-debug.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}
