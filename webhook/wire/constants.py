"""Every label, annotation and RBAC name the project reads or writes, in one place.

Other modules import these names; a key spelled inline anywhere else is a bug.
"""

from typing import Final

DOMAIN: Final = "sidecar-debug.io"

# Default names (each is a setting or a flag; these are what an unconfigured install uses).
PRODUCT: Final = "sidecar-debug"  # Service, webhook configurations, managed-by label value
DEFAULT_SIDECAR_NAME: Final = "debug-toolset"  # the injected container; `attach` prefix too
TOOLSET_ENTRYPOINT: Final = "toolset-entrypoint"  # the toolset image's entrypoint command
DEFAULT_CERTIFICATES_SECRET: Final = f"{PRODUCT}-tls"
DEFAULT_ROLE_PREFIX: Final = f"{PRODUCT}-profile-"  # the chart's `<fullname>-profile-<name>`
CA_COMMON_NAME: Final = f"{PRODUCT}-ca"

# Opt in / opt out (the key and values are settings; these are the defaults).
LABEL_DEBUG: Final = "debug"
LABEL_VALUE_ENABLED: Final = "enabled"
LABEL_VALUE_DISABLED: Final = "disabled"

# Per-pod annotations a user sets.
ANNOTATION_INJECT: Final = f"{DOMAIN}/inject"  # "false" opts the pod out
ANNOTATION_PROFILE: Final = f"{DOMAIN}/profile"  # lttng | perf | bcc | full | a custom profile
ANNOTATION_RUNTIME: Final = f"{DOMAIN}/runtime"  # dotnet | node | python | java
ANNOTATION_TOOLSET_IMAGE: Final = f"{DOMAIN}/toolset-image"  # honoured only if policy allows it
# injected | standby. Also read as a namespace LABEL: the default mode of the namespace's pods.
ANNOTATION_MODE: Final = f"{DOMAIN}/mode"
LABEL_NAMESPACE_MODE: Final = ANNOTATION_MODE
MODE_INJECTED: Final = "injected"  # the toolset runs as a sidecar from the start
MODE_STANDBY: Final = "standby"  # only the inert wiring; `attach` adds the toolset when needed
MODES: Final = (MODE_INJECTED, MODE_STANDBY)

# Annotations the webhook writes.
ANNOTATION_STATUS: Final = (
    f"{DOMAIN}/status"  # JSON: profile, grant, version; makes injection idempotent
)
ANNOTATION_OVERDUE_AFTER: Final = (
    f"{DOMAIN}/overdue-after"  # RFC 3339 time set by a policy's maxSessionDuration
)

# Annotations only the webhook and the controller may change (webhook.admission.guard checks every
# UPDATE of a pod in a guarded namespace; settings.annotationOwners names who they are).
OWNED_ANNOTATIONS: Final = (ANNOTATION_STATUS, ANNOTATION_OVERDUE_AFTER)
# Namespace label that puts a namespace under the guard besides the opt-in label (the chart's
# guard entries select it), and names its Pod Security level: baseline | restricted.
LABEL_GUARD: Final = f"{DOMAIN}/guard"

# Node labels and pod fields that say which OS a pod runs on (the toolset is a Linux image).
LABEL_OS: Final = "kubernetes.io/os"
LABEL_OS_BETA: Final = "beta.kubernetes.io/os"
OS_LINUX: Final = "linux"

# What the expiry controller does with a session past maxSessionDuration (policy `onExpiry`).
ON_EXPIRY_REPORT: Final = "report"  # a Warning Event on the pod and the metrics
ON_EXPIRY_EVICT: Final = "evict"  # the Eviction API (PodDisruptionBudgets apply)
ON_EXPIRY_STOP: Final = "stop"  # stop the processes of attached (ephemeral) toolset containers
ON_EXPIRY_ACTIONS: Final = (ON_EXPIRY_REPORT, ON_EXPIRY_EVICT, ON_EXPIRY_STOP)

# Label the webhook's own namespace carries (kubernetes >= 1.21 sets it on every namespace).
LABEL_NAMESPACE_NAME: Final = "kubernetes.io/metadata.name"
# Namespace label of the Pod Security admission level (a privileged sidecar needs "privileged").
LABEL_POD_SECURITY_ENFORCE: Final = "pod-security.kubernetes.io/enforce"
# Namespace label of the Pod Security policy version (`latest` or `v1.N`): the guard applies the
# checks as they were at that version, as Pod Security admission does.
LABEL_POD_SECURITY_ENFORCE_VERSION: Final = "pod-security.kubernetes.io/enforce-version"

# Labels and type of the TLS Secret the webhook manages itself (certificatesMode self).
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = PRODUCT
SECRET_TYPE_TLS: Final = "kubernetes.io/tls"  # noqa: S105 - a type name, not a password

# RBAC grant for privileged profiles (the PodSecurityPolicy "use" model).
RBAC_GROUP: Final = DOMAIN
RBAC_RESOURCE: Final = "debugprofiles"
RBAC_VERB: Final = "use"
NAMESPACE_OPT_IN_GRANT: Final = "namespace-opt-in"
# Adding, changing or removing the guard label, or un-guarding a namespace (docs/policy.md).
NAMESPACE_GUARD_GRANT: Final = "namespace-guard"

# Namespaces never injected, whatever their labels say.
ALWAYS_EXCLUDED_NAMESPACES: Final = frozenset({"kube-system", "kube-public", "kube-node-lease"})

# AdmissionResponse auditAnnotations keys (the apiserver prefixes them with the webhook name).
AUDIT_DECISION: Final = "decision"
AUDIT_REASON: Final = "reason"
AUDIT_PROFILE: Final = "profile"
AUDIT_GRANT: Final = "grant"

# Environment of the toolset container (injected sidecar and attached ephemeral container).
ENV_PROFILE: Final = "SIDECAR_DEBUG_PROFILE"  # the profile it runs with
ENV_TECHNIQUES: Final = "SIDECAR_DEBUG_TECHNIQUES"  # comma-separated techniques of that profile
# debuginfod for stripped binaries (settings debuginfodUrls, ...; only with URLs): elfutils'
# names, read by toolset/lib/debuginfo.py (and by elfutils' own tools in the toolset).
ENV_DEBUGINFOD_URLS: Final = "DEBUGINFOD_URLS"
ENV_DEBUGINFOD_MAXTIME: Final = "DEBUGINFOD_MAXTIME"
ENV_DEBUGINFOD_MAXSIZE: Final = "DEBUGINFOD_MAXSIZE"
# Pods that run to completion (restartPolicy Never/OnFailure) without native sidecars: the
# toolset exits 0 once the app's processes are gone, so that the Job completes
# (toolset/bin/toolset-entrypoint reads them).
ENV_EXIT_WITH_APP: Final = "SIDECAR_DEBUG_EXIT_WITH_APP"
ENV_EXIT_WITH_APP_VALUE: Final = "true"
ENV_APP_CONTAINERS: Final = "SIDECAR_DEBUG_APP_CONTAINERS"  # comma-separated, informational
# Set by `attach` on the ephemeral container: with the name prefix, what marks it as ours.
ENV_ATTACHED: Final = "SIDECAR_DEBUG_ATTACHED"
ENV_ATTACHED_VALUE: Final = "true"
# Written by the webhook's ephemeral-container gate: who granted the profile (e.g. user:alice).
ENV_GRANT: Final = "SIDECAR_DEBUG_GRANT"
# The session's facts, written by the webhook into the toolset container's env (immutable once
# the pod or ephemeral container exists, unlike annotations anyone with `patch pods` can change):
# when the session started and when it must end (RFC 3339 UTC; no deadline = unset). The
# controller and the toolset itself read them from there, never from annotations.
ENV_SESSION_STARTED: Final = "SIDECAR_DEBUG_SESSION_STARTED"
ENV_SESSION_DEADLINE: Final = "SIDECAR_DEBUG_SESSION_DEADLINE"
# Name prefix of containers added by `attach` (then 6 hex digits).
ATTACHED_CONTAINER_PREFIX: Final = f"{DEFAULT_SIDECAR_NAME}-"

# Environment variable prefix for settings (SIDECAR_DEBUG_TOOLSET_IMAGE, ...).
ENV_PREFIX: Final = "SIDECAR_DEBUG_"

# The chart's settings ConfigMaps, read by `attach` and the session commands (toolset image and
# profiles of the installed webhook).
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"  # value PRODUCT on the webhook configuration
ANNOTATION_SETTINGS: Final = f"{DOMAIN}/settings"  # on it: NAMESPACE/NAME of the settings ConfigMap
ANNOTATION_PROFILES_CONFIGMAP: Final = f"{DOMAIN}/profiles-configmap"  # on the settings ConfigMap
SETTINGS_KEY: Final = "config.yaml"
PROFILES_KEY: Final = "profiles.yaml"
DEFAULT_SETTINGS_CONFIGMAP: Final = f"{PRODUCT}/{PRODUCT}-config"  # the default chart install
ENV_SETTINGS_CONFIGMAP: Final = "SIDECAR_DEBUG_SETTINGS_CONFIGMAP"  # NAMESPACE/NAME

# Scheduled profiling (webhook.schedules): an annotation on a namespace or a pod, JSON or YAML
# (cron, duration, technique, selector, maxPods); the controller runs it and keeps the results.
ANNOTATION_SCHEDULE: Final = f"{DOMAIN}/schedule"
TECHNIQUE_PERF: Final = "perf"  # toolset/bin/flamegraph (perf record -g)
TECHNIQUE_BPFTRACE_PROFILE: Final = "bpftrace-profile"  # bpftrace profile:hz, the pod's PID ns
SCHEDULE_TECHNIQUES: Final = (TECHNIQUE_PERF, TECHNIQUE_BPFTRACE_PROFILE)
# The profile technique each schedule technique needs (the toolset's granted profile must have it).
SCHEDULE_TECHNIQUE_NEEDS: Final = {TECHNIQUE_PERF: "perf", TECHNIQUE_BPFTRACE_PROFILE: "bcc"}
# Retention of the stored results, read by the results service (chart: results.retention).
ENV_RESULTS_KEEP: Final = "SIDECAR_DEBUG_RESULTS_KEEP"  # runs kept per pod
ENV_RESULTS_MAX_AGE: Final = "SIDECAR_DEBUG_RESULTS_MAX_AGE"  # e.g. 30d
# Bytes a namespace's runs may take (chart: results.quotaPerNamespace): "25%" of the volume,
# a size ("500Mi"), or "0" for none; the oldest runs of the namespace go first.
ENV_RESULTS_NAMESPACE_QUOTA: Final = "SIDECAR_DEBUG_RESULTS_NAMESPACE_QUOTA"

# The results service (webhook.results.service): the toolset's results agent pulls its plan and
# pushes its runs over HTTPS with a projected, audience-bound ServiceAccount token that the
# webhook mounts into the toolset container only. The webhook writes these into the toolset's env.
ENV_RESULTS_URL: Final = "SIDECAR_DEBUG_RESULTS_URL"  # https://<svc>.<ns>.svc:<port>
ENV_RESULTS_CA: Final = "SIDECAR_DEBUG_RESULTS_CA"  # PEM bundle the service's certificate chains to
ENV_POD_NAME: Final = "SIDECAR_DEBUG_POD_NAME"  # the downward API's metadata.name
RESULTS_TOKEN_VOLUME: Final = f"{PRODUCT}-results-token"
RESULTS_TOKEN_DIR: Final = f"/var/run/secrets/{DOMAIN}/results"
RESULTS_TOKEN_FILE: Final = "token"  # noqa: S105 - a file name
# Pod label the webhook adds with the results token, so a NetworkPolicy can admit these pods.
LABEL_RESULTS_AGENT: Final = f"{DOMAIN}/results-agent"
LABEL_RESULTS_AGENT_VALUE: Final = "true"
# What the apiserver puts into a TokenReview's user.extra for a token bound to a pod.
EXTRA_POD_NAME: Final = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID: Final = "authentication.kubernetes.io/pod-uid"
# Readers see a namespace's runs when RBAC allows them `get` on this resource there.
RESULTS_READ_RESOURCE: Final = "debugresults"
RESULTS_READ_VERB: Final = "get"

# What OTLP exports name the app by (OpenTelemetry's semantic conventions, "Specify resource
# attributes using Kubernetes annotations": service.name is the first found of these, in order;
# the plain `app` label, not in the conventions, last).
ANNOTATION_OTEL_SERVICE_NAME: Final = "resource.opentelemetry.io/service.name"
ANNOTATION_OTEL_SERVICE_VERSION: Final = "resource.opentelemetry.io/service.version"
LABEL_APP_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_VERSION: Final = "app.kubernetes.io/version"
LABEL_APP: Final = "app"
