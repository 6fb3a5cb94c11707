{{- /*
The results page in the controller pod (issue 13, scheduled profiling). templates/controller.yaml
includes these two in its pod spec: extra containers after the controller, extra volumes
(the `results` volume the controller mounts at /var/lib/sidecar-debug/results when
`results.enabled`). Empty until the schedules part fills them.
*/ -}}
{{- define "sidecar-debug.controller.resultsContainers" -}}
{{- end -}}
{{- define "sidecar-debug.controller.resultsVolumes" -}}
{{- end -}}
