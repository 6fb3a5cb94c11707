{{/*
Names. Kubernetes names are limited to 63 characters (DNS label), so everything is truncated.
*/}}
{{- define "sidecar-debug.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sidecar-debug.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sidecar-debug.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A name derived from the full name: (dict "root" $ "suffix" "tls"). */}}
{{- define "sidecar-debug.suffixedName" -}}
{{- $base := include "sidecar-debug.fullname" .root -}}
{{- printf "%s-%s" ($base | trunc (int (sub 62 (len .suffix)))) .suffix | trimSuffix "-" -}}
{{- end -}}

{{- define "sidecar-debug.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sidecar-debug.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "sidecar-debug.labels" -}}
helm.sh/chart: {{ include "sidecar-debug.chart" . }}
app.kubernetes.io/name: {{ include "sidecar-debug.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sidecar-debug
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the webhook pods: the selector labels plus the common ones. */}}
{{- define "sidecar-debug.podLabels" -}}
{{ include "sidecar-debug.selectorLabels" . }}
helm.sh/chart: {{ include "sidecar-debug.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sidecar-debug
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sidecar-debug.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sidecar-debug.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sidecar-debug.serviceName" -}}
{{- include "sidecar-debug.fullname" . -}}
{{- end -}}

{{/* One name for the Mutating and the Validating configuration: the webhook patches both caBundles by it. */}}
{{- define "sidecar-debug.webhookConfigurationName" -}}
{{- include "sidecar-debug.fullname" . -}}
{{- end -}}

{{- define "sidecar-debug.tlsSecretName" -}}
{{- if .Values.certificates.secretName -}}
{{- .Values.certificates.secretName -}}
{{- else -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "tls") -}}
{{- end -}}
{{- end -}}

{{- define "sidecar-debug.configMapName" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "config") -}}
{{- end -}}

{{- define "sidecar-debug.profilesConfigMapName" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "profiles") -}}
{{- end -}}

{{- define "sidecar-debug.policiesConfigMapName" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "policies") -}}
{{- end -}}

{{/*
Grant ClusterRoles are named <prefix><profile>; the webhook gets the prefix (profileRolePrefix) to
name the role in its deny messages. RBAC names are not limited to 63 characters.
*/}}
{{- define "sidecar-debug.profileRolePrefix" -}}
{{- printf "%s-profile-" (include "sidecar-debug.fullname" .) -}}
{{- end -}}

{{- define "sidecar-debug.certificateName" -}}
{{- include "sidecar-debug.suffixedName" (dict "root" . "suffix" "serving") -}}
{{- end -}}

{{/*
Image reference from {repository, tag, digest}: repository:tag, or repository:tag@digest when a
digest pins it (the tag then only documents). Call with (dict "image" .Values.x.image "root" $).
*/}}
{{- define "sidecar-debug.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "sidecar-debug.webhookImage" -}}
{{- include "sidecar-debug.image" (dict "image" .Values.webhook.image "root" .) -}}
{{- end -}}

{{- define "sidecar-debug.toolsetImage" -}}
{{- include "sidecar-debug.image" (dict "image" .Values.toolset.image "root" .) -}}
{{- end -}}

{{/*
Namespaces never injected: the control plane's, the release namespace (the webhook must never
depend on itself) and the user's extras. Returns a YAML list; use with fromYamlArray.
*/}}
{{- define "sidecar-debug.excludedNamespaces" -}}
{{- $always := list "kube-system" "kube-public" "kube-node-lease" .Release.Namespace -}}
{{- concat $always .Values.injection.excludedNamespaces | uniq | toYaml -}}
{{- end -}}

{{/* "true"/"false": native sidecars when asked, or on Kubernetes >= 1.29 for `auto`. */}}
{{- define "sidecar-debug.nativeSidecar" -}}
{{- $value := toString .Values.sidecar.nativeSidecar -}}
{{- if eq $value "auto" -}}
{{- semverCompare ">=1.29.0-0" .Capabilities.KubeVersion.Version | toString -}}
{{- else if eq $value "true" -}}
true
{{- else -}}
false
{{- end -}}
{{- end -}}

{{- define "sidecar-debug.customProfiles" -}}
{{- if or .Values.profiles .Values.runtimes -}}true{{- end -}}
{{- end -}}

{{/*
The active ProfileSet document: the built-in file (synced into files/profiles.yaml), with its
profiles and/or runtimes replaced by the values. Returns YAML; use with fromYaml.
*/}}
{{- define "sidecar-debug.profileSet" -}}
{{- $builtin := .Files.Get "files/profiles.yaml" | fromYaml -}}
{{- if not $builtin.profiles -}}
{{- fail "files/profiles.yaml is missing or empty: run scripts/sync-chart-files.sh" -}}
{{- end -}}
{{- $doc := dict "apiVersion" (default "sidecar-debug.io/v1alpha1" $builtin.apiVersion) "kind" "ProfileSet" -}}
{{- $_ := set $doc "profiles" (default $builtin.profiles .Values.profiles) -}}
{{- $_ := set $doc "runtimes" (default $builtin.runtimes .Values.runtimes) -}}
{{- toYaml $doc -}}
{{- end -}}

{{/*
Names of the active profiles that need an RBAC grant, with the same rule as the webhook
(webhook/guard/privilege.py privilege_reasons; tests/chart/test_chart_privilege.py compares the
two): the toolset goes beyond Pod Security baseline, as webhook/guard/pss.py checks it.
privileged; capabilities beyond baseline's list, compared as written (CAP_CHOWN is not CHOWN);
hostPaths; seccomp or AppArmor other than RuntimeDefault/Localhost; SELinux types other than
the container types, or any user or role; procMount other than Default; Windows hostProcess.
A field of another shape than the API's is a reason too. Returns a YAML list.
*/}}
{{- define "sidecar-debug.privilegedProfiles" -}}
{{- $baseline := list "AUDIT_WRITE" "CHOWN" "DAC_OVERRIDE" "FOWNER" "FSETID" "KILL" "MKNOD" "NET_BIND_SERVICE" "SETFCAP" "SETGID" "SETPCAP" "SETUID" "SYS_CHROOT" -}}
{{- $profileTypes := list "RuntimeDefault" "Localhost" -}}
{{- $seLinuxTypes := list "" "container_t" "container_init_t" "container_kvm_t" "container_engine_t" -}}
{{- $names := list -}}
{{- range (include "sidecar-debug.profileSet" . | fromYaml).profiles -}}
{{- $grant := not (empty .hostPaths) -}}
{{- $sc := .securityContext -}}
{{- if kindIs "invalid" $sc -}}{{- $sc = dict -}}{{- end -}}
{{- if not (kindIs "map" $sc) -}}
{{- $grant = true -}}
{{- $sc = dict -}}
{{- end -}}
{{- /* privileged, hostProcess: unset or false */ -}}
{{- $windows := $sc.windowsOptions -}}
{{- if kindIs "invalid" $windows -}}{{- $windows = dict -}}{{- end -}}
{{- if not (kindIs "map" $windows) -}}{{- $grant = true -}}{{- $windows = dict -}}{{- end -}}
{{- range $value := list $sc.privileged $windows.hostProcess -}}
{{- if not (or (kindIs "invalid" $value) (and (kindIs "bool" $value) (not $value))) -}}
{{- $grant = true -}}
{{- end -}}
{{- end -}}
{{- /* capabilities.add: each one of baseline's, as written */ -}}
{{- $caps := $sc.capabilities -}}
{{- if kindIs "invalid" $caps -}}{{- $caps = dict -}}{{- end -}}
{{- if not (kindIs "map" $caps) -}}{{- $grant = true -}}{{- $caps = dict -}}{{- end -}}
{{- $add := $caps.add -}}
{{- if kindIs "invalid" $add -}}{{- $add = list -}}{{- end -}}
{{- if not (kindIs "slice" $add) -}}{{- $grant = true -}}{{- $add = list -}}{{- end -}}
{{- range $add -}}
{{- if not (and (kindIs "string" .) (has . $baseline)) -}}
{{- $grant = true -}}
{{- end -}}
{{- end -}}
{{- /* seccompProfile, appArmorProfile: when set, of type RuntimeDefault or Localhost */ -}}
{{- range $profile := list $sc.seccompProfile $sc.appArmorProfile -}}
{{- if not (kindIs "invalid" $profile) -}}
{{- if not (and (kindIs "map" $profile) (kindIs "string" $profile.type) (has $profile.type $profileTypes)) -}}
{{- $grant = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* seLinuxOptions: a container type, no user, no role */ -}}
{{- $seLinux := $sc.seLinuxOptions -}}
{{- if not (kindIs "invalid" $seLinux) -}}
{{- if not (kindIs "map" $seLinux) -}}
{{- $grant = true -}}
{{- else -}}
{{- $type := $seLinux.type -}}
{{- if kindIs "invalid" $type -}}{{- $type = "" -}}{{- end -}}
{{- if not (and (kindIs "string" $type) (has $type $seLinuxTypes)) -}}{{- $grant = true -}}{{- end -}}
{{- range $value := list $seLinux.user $seLinux.role -}}
{{- if not (or (kindIs "invalid" $value) (eq (toString $value) "")) -}}{{- $grant = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* procMount: unset or Default */ -}}
{{- if not (or (kindIs "invalid" $sc.procMount) (eq (toString $sc.procMount) "Default")) -}}
{{- $grant = true -}}
{{- end -}}
{{- if $grant -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- end -}}
{{- toYaml $names -}}
{{- end -}}

{{/* Policy files for the ConfigMap: a dict of ConfigMap key -> content. Returns YAML. */}}
{{- define "sidecar-debug.policyFiles" -}}
{{- $out := dict -}}
{{- range .Values.policies.files -}}
{{- $content := $.Files.Get (printf "files/policies/%s" .) -}}
{{- if not $content -}}
{{- fail (printf "policies.files: %q is not a policy file shipped with the chart (files/policies/); run scripts/sync-chart-files.sh, or give it under policies.extra" .) -}}
{{- end -}}
{{- $_ := set $out (replace "/" "-" .) $content -}}
{{- end -}}
{{- range $name, $doc := .Values.policies.extra -}}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+\\.ya?ml$" $name) -}}
{{- fail (printf "policies.extra: key %q must be a file name ending in .yaml (letters, digits, '-', '_', '.')" $name) -}}
{{- end -}}
{{- if hasKey $out $name -}}
{{- fail (printf "policies.extra: %q clashes with a file from policies.files" $name) -}}
{{- end -}}
{{- $_ := set $out $name (ternary $doc (toYaml $doc) (kindIs "string" $doc)) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The webhook's config file (webhook/config.py Settings, camelCase keys). The namespace comes from
the environment (SIDECAR_DEBUG_WEBHOOK_NAMESPACE, downward API), not from here.
*/}}
{{- define "sidecar-debug.settings" -}}
{{- $s := dict -}}
{{- $_ := set $s "toolsetImage" (include "sidecar-debug.toolsetImage" .) -}}
{{- $_ := set $s "imagePullPolicy" .Values.toolset.image.pullPolicy -}}
{{- with .Values.toolset.debuginfod -}}
{{- if .urls -}}
{{- $_ := set $s "debuginfodUrls" .urls -}}
{{- $_ := set $s "debuginfodTimeoutSeconds" (int .timeoutSeconds) -}}
{{- $_ := set $s "debuginfodMaxBytes" (int64 .maxSizeBytes) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $s "sidecarName" .Values.sidecar.name -}}
{{- $_ := set $s "sidecarResources" .Values.sidecar.resources -}}
{{- $_ := set $s "nativeSidecar" (eq (include "sidecar-debug.nativeSidecar" .) "true") -}}
{{- $_ := set $s "defaultProfile" .Values.sidecar.defaultProfile -}}
{{- $_ := set $s "defaultMode" .Values.injection.defaultMode -}}
{{- if include "sidecar-debug.customProfiles" . -}}
{{- $_ := set $s "profilesFile" "/etc/sidecar-debug/profiles/profiles.yaml" -}}
{{- end -}}
{{- $_ := set $s "excludedNamespaces" (include "sidecar-debug.excludedNamespaces" . | fromYamlArray) -}}
{{- $_ := set $s "labelKey" .Values.injection.labelKey -}}
{{- $_ := set $s "labelEnabled" .Values.injection.labelEnabled -}}
{{- $_ := set $s "labelDisabled" .Values.injection.labelDisabled -}}
{{- $_ := set $s "policyPath" "/etc/sidecar-debug/policies" -}}
{{- $_ := set $s "profileRolePrefix" (include "sidecar-debug.profileRolePrefix" .) -}}
{{- $_ := set $s "port" (int .Values.webhook.port) -}}
{{- $_ := set $s "workers" (int .Values.webhook.workers) -}}
{{- $_ := set $s "threads" (int .Values.webhook.threads) -}}
{{- if ne .Values.certificates.mode "self" -}}
{{- $_ := set $s "tlsCertFile" "/etc/sidecar-debug/tls/tls.crt" -}}
{{- $_ := set $s "tlsKeyFile" "/etc/sidecar-debug/tls/tls.key" -}}
{{- end -}}
{{- $_ := set $s "maxRequestBytes" (int64 .Values.webhook.maxRequestBytes) -}}
{{- $_ := set $s "logLevel" .Values.webhook.logLevel -}}
{{- $_ := set $s "sarTimeoutSeconds" .Values.webhook.sarTimeoutSeconds -}}
{{- $_ := set $s "sarCacheSeconds" .Values.webhook.sarCacheSeconds -}}
{{- $_ := set $s "certificatesMode" .Values.certificates.mode -}}
{{- $_ := set $s "certificatesSecret" (include "sidecar-debug.tlsSecretName" .) -}}
{{- $_ := set $s "serviceName" (include "sidecar-debug.serviceName" .) -}}
{{- $_ := set $s "webhookConfiguration" (include "sidecar-debug.webhookConfigurationName" .) -}}
{{- $_ := set $s "clusterDomain" .Values.clusterDomain -}}
{{- if (.Values.results | default dict).enabled -}}
{{- $_ := set $s "resultsUrl" (include "sidecar-debug.resultsUrl" .) -}}
{{- $_ := set $s "resultsAudience" (include "sidecar-debug.resultsAudience" .) -}}
{{- $_ := set $s "resultsTokenSeconds" (int .Values.results.tokenExpirationSeconds) -}}
{{- if eq .Values.certificates.mode "self" -}}
{{- $_ := set $s "resultsServiceName" (include "sidecar-debug.resultsName" .) -}}
{{- end -}}
{{- end -}}
{{- $g := .Values.guard -}}
{{- $_ := set $s "guardLevel" $g.level -}}
{{- $owners := list (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "sidecar-debug.serviceAccountName" .)) -}}
{{- if .Values.controller.enabled -}}
{{- $owners = append $owners (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "sidecar-debug.controllerServiceAccountName" .)) -}}
{{- end -}}
{{- $_ := set $s "annotationOwners" (concat $owners $g.annotationOwners | uniq) -}}
{{- $_ := set $s "guardExemptUsernames" $g.exemptions.usernames -}}
{{- $_ := set $s "guardExemptRuntimeClassNames" $g.exemptions.runtimeClassNames -}}
{{- $_ := set $s "guardExemptNamespaces" $g.exemptions.namespaces -}}
{{- toYaml $s -}}
{{- end -}}

{{/*
Misuse the schema cannot express fails the render with a message naming the value; softer
problems come back as warnings (one per line) that NOTES.txt prints.
*/}}
{{- define "sidecar-debug.validateValues" -}}
{{- $warnings := list -}}
{{- $profileSet := include "sidecar-debug.profileSet" . | fromYaml -}}
{{- $profileNames := list -}}
{{- range $profileSet.profiles -}}
{{- $profileNames = append $profileNames .name -}}
{{- end -}}
{{- if not (has .Values.sidecar.defaultProfile $profileNames) -}}
{{- fail (printf "sidecar.defaultProfile: %q is not a profile; known: %s" .Values.sidecar.defaultProfile (join ", " $profileNames)) -}}
{{- end -}}
{{- if .Values.rbac.create -}}
{{- range .Values.rbac.profileRoles -}}
{{- if not (has . $profileNames) -}}
{{- fail (printf "rbac.profileRoles: %q is not a profile; known: %s" . (join ", " $profileNames)) -}}
{{- end -}}
{{- end -}}
{{- range (include "sidecar-debug.privilegedProfiles" . | fromYamlArray) -}}
{{- if not (has . (default list $.Values.rbac.profileRoles)) -}}
{{- $warnings = append $warnings (printf "profile %q needs an RBAC grant but rbac.profileRoles has no ClusterRole for it: add it, or create a role with verb use on debugprofiles.sidecar-debug.io resourceNames [%s] yourself." . .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq .Values.certificates.mode "provided" -}}
{{- if not .Values.certificates.secretName -}}
{{- fail "certificates.mode=provided needs certificates.secretName: the existing TLS Secret (tls.crt, tls.key, ca.crt) in the release namespace" -}}
{{- end -}}
{{- if not .Values.certificates.provided.caBundle -}}
{{- fail "certificates.mode=provided needs certificates.provided.caBundle: the base64-encoded PEM CA that signed the Secret's certificate" -}}
{{- end -}}
{{- if not (contains "BEGIN CERTIFICATE" (b64dec .Values.certificates.provided.caBundle)) -}}
{{- fail "certificates.provided.caBundle must be base64-encoded PEM (base64 -w0 ca.crt), it does not decode to a certificate" -}}
{{- end -}}
{{- else if .Values.certificates.provided.caBundle -}}
{{- $warnings = append $warnings (printf "certificates.provided.caBundle is ignored in mode %q." .Values.certificates.mode) -}}
{{- end -}}
{{- if and (eq .Values.certificates.mode "certManager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) -}}
{{- $warnings = append $warnings "certificates.mode=certManager but the cluster does not serve cert-manager.io/v1: install cert-manager first, or the Issuer/Certificate cannot be created." -}}
{{- end -}}
{{- if and (eq (toString .Values.sidecar.nativeSidecar) "true") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "sidecar.nativeSidecar=true needs Kubernetes >= 1.29 (this cluster: %s); use auto or false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if not (or .Values.injection.namespaceOptIn .Values.injection.podOptIn) -}}
{{- $warnings = append $warnings "injection.namespaceOptIn and injection.podOptIn are both false: the webhook receives no pods." -}}
{{- end -}}
{{- if has .Values.injection.labelEnabled (list .Values.injection.labelDisabled) -}}
{{- fail "injection.labelEnabled and injection.labelDisabled must differ" -}}
{{- end -}}
{{- if and (eq .Values.webhook.failurePolicy "Fail") (lt (int .Values.webhook.replicaCount) 2) -}}
{{- $warnings = append $warnings "webhook.failurePolicy=Fail with a single replica: pod creation in opted-in namespaces stops whenever that pod is down." -}}
{{- end -}}
{{- if ge (mulf 2 .Values.webhook.sarTimeoutSeconds) (float64 .Values.webhook.timeoutSeconds) -}}
{{- $warnings = append $warnings (printf "two SubjectAccessReview calls (2 x webhook.sarTimeoutSeconds=%v) do not fit inside webhook.timeoutSeconds=%v: the apiserver may give up first." .Values.webhook.sarTimeoutSeconds .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if ne (include "sidecar-debug.nameLabelProtected" .) "true" -}}
{{- $warnings = append $warnings (printf "Kubernetes %s neither sets nor protects the namespace label kubernetes.io/metadata.name (1.21+ does): anyone who may patch a namespace can write kube-system there. So no webhook entry of this chart selects by it: kube-system, kube-public, kube-node-lease, %s and injection.excludedNamespaces are skipped by the webhook itself, by the name in each request (their pods that opt in still reach the webhook). With the guard or the namespace gate, namespace-name.sidecar-debug.io (failurePolicy Fail) refuses any value of that label other than the namespace's own name. Do not rely on the label elsewhere (NetworkPolicies) until every namespace carries its own name: kubectl get namespaces -L kubernetes.io/metadata.name lists the values; fix one with kubectl label namespace NAME kubernetes.io/metadata.name=NAME --overwrite." .Capabilities.KubeVersion.Version .Release.Namespace) -}}
{{- end -}}
{{- if and .Values.namespaceGate.enabled (not (and .Values.rbac.create .Values.rbac.namespaceOptInRole)) -}}
{{- $warnings = append $warnings "namespaceGate.enabled without rbac.namespaceOptInRole: create the ClusterRole granting use on debugprofiles/namespace-opt-in yourself." -}}
{{- end -}}
{{- if and .Values.guard.enabled (not (and .Values.rbac.create .Values.rbac.namespaceGuardRole)) -}}
{{- $warnings = append $warnings "guard.enabled without rbac.namespaceGuardRole: create the ClusterRole granting use on debugprofiles/namespace-guard yourself (who may change a namespace's guard label)." -}}
{{- end -}}
{{- join "\n" $warnings -}}
{{- end -}}

{{/*
"true" when the apiserver sets and protects kubernetes.io/metadata.name (Kubernetes >= 1.21).
Below, anyone who may patch a namespace can write any value there (issue 24): no selector of the
chart may then exclude by it, and the name label's gate refuses any value but the namespace's
own name.
*/}}
{{- define "sidecar-debug.nameLabelProtected" -}}
{{- semverCompare ">=1.21.0-0" .Capabilities.KubeVersion.Version | toString -}}
{{- end -}}

{{/*
Webhook entry selectors: the excluded namespaces by name, where the name label can be trusted.
On < 1.21 nothing (the entries select by the opt-in and guard labels only, and the webhook
skips the excluded namespaces by the request's namespace name).
*/}}
{{- define "sidecar-debug.namespaceExclusion" -}}
{{- if eq (include "sidecar-debug.nameLabelProtected" .) "true" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
{{ include "sidecar-debug.excludedNamespaces" . | indent 4 }}
{{- end -}}
{{- end -}}

{{/*
Guarded namespaces (webhook/wire/constants.py LABEL_GUARD), as the matchExpressions of one of three
disjoint parts: "optIn" (labelled <labelKey>=<labelEnabled>), "label" (not opted in, carrying the
guard label) and "none" (neither). Selectors cannot say "or": each part is its own entry.
*/}}
{{- define "sidecar-debug.guardedNamespaces" -}}
{{- $inj := .root.Values.injection -}}
- key: {{ $inj.labelKey }}
  operator: {{ ternary "In" "NotIn" (eq .by "optIn") }}
  values: [{{ $inj.labelEnabled | quote }}]
{{- if ne .by "optIn" }}
- key: sidecar-debug.io/guard
  operator: {{ ternary "Exists" "DoesNotExist" (eq .by "label") }}
{{- end }}
{{- with include "sidecar-debug.namespaceExclusion" .root }}
{{ . }}
{{- end }}
{{- end -}}
