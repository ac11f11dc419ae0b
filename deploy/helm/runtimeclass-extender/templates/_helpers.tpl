{{/*
The one label every object of the overlays carries (each kustomization's `labels:`).
No Helm labels are added: tests/helm/ compares every object with its overlay's as it is.
*/}}
{{- define "runtimeclass-extender.labels" -}}
app.kubernetes.io/part-of: runtimeclass-extender
{{- end }}

{{/*
"true" in the default-scheduler mode (mode, overlays/default-scheduler): the cluster's own
scheduler places the pods, and components/default-scheduler-placement leaves out
kube-scheduler's container, configuration, ServiceAccount and RBAC and the extender's
token Secret, runs the pod as the extender's ServiceAccount and adds its guard.
_validate.tpl admits it only with the node labels and the pod admission policies.
*/}}
{{- define "runtimeclass-extender.defaultScheduler" -}}
{{- if eq .Values.mode "default-scheduler" }}true{{ end -}}
{{- end }}

{{/*
"true" with the derived node labels (components/label-nodes): labelNodes.enabled, or when
it is null the mode's default (on in the default-scheduler mode, which places the pods by
them; off in predicate mode).
*/}}
{{- define "runtimeclass-extender.labelNodes" -}}
{{- $enabled := .Values.labelNodes.enabled -}}
{{- if kindIs "invalid" $enabled -}}
{{- $enabled = eq .Values.mode "default-scheduler" -}}
{{- end -}}
{{- if $enabled }}true{{ end -}}
{{- end }}

{{/*
"true" when pending pods are requeued, "" when not: requeuePendingPods.enabled, or when
it is null the mode's default (on in predicate mode, as overlays/predicate-mode and tls
have it; off in the default-scheduler mode, as overlays/default-scheduler, where no pod
waits for runtimeclass-scheduler).
*/}}
{{- define "runtimeclass-extender.requeue" -}}
{{- $enabled := .Values.requeuePendingPods.enabled -}}
{{- if kindIs "invalid" $enabled -}}
{{- $enabled = eq .Values.mode "predicate" -}}
{{- end -}}
{{- if $enabled }}true{{ end -}}
{{- end }}

{{/*
The KubeSchedulerConfiguration of predicate mode, byte for byte the file of the matching
overlay or component (copied under files/ with deploy/'s paths; tests/helm/ checks each
copy): the base's, the node labels', or the tls overlay's. _validate.tpl admits only the
combinations something in deploy/ ships.
*/}}
{{- define "runtimeclass-extender.schedulerConfig" -}}
{{- $file := "base/scheduler-config.yaml" -}}
{{- if include "runtimeclass-extender.labelNodes" . -}}
{{- $file = "components/label-nodes/scheduler-config.yaml" -}}
{{- else if .Values.tls.enabled -}}
{{- $file = "overlays/tls/scheduler-config.yaml" -}}
{{- end -}}
{{- .Files.Get (printf "files/%s" $file) -}}
{{- end }}

{{/*
The scheduler ConfigMap's name: kustomize's configMapGenerator name plus the suffix it
appends, so that a changed configuration is a new ConfigMap and rolls the Deployment.

The suffix is kustomize's hash (api/hasher/hasher.go, encodeConfigMap and encode): the
sha256 of the JSON {"data": <data>, "kind": "ConfigMap", "name": ""} as Go's
encoding/json writes it (keys sorted; Helm's toJson is that encoder too), its first ten
hex digits with 0, 1, 3, a and e mapped to g, h, k, m and t. "name" is always empty:
kustomize looks the name up with the single path element "metadata/name", which matches
no field.
*/}}
{{- define "runtimeclass-extender.schedulerConfigName" -}}
{{- $data := dict "config.yaml" (include "runtimeclass-extender.schedulerConfig" .) -}}
{{- $hash := dict "data" $data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- $hash = $hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
runtimeclass-scheduler-config-{{ $hash }}
{{- end }}

{{/*
The extender image: repository and tag (the chart's appVersion when empty).
*/}}
{{- define "runtimeclass-extender.image" -}}
{{- printf "%s:%s" .Values.extender.image.repository (.Values.extender.image.tag | default .Chart.AppVersion) -}}
{{- end }}

{{/*
The issuer of the webhooks' certificate with certManager: the self-signed Issuer of the
sub-component unless certManager.issuerRef names another.
*/}}
{{- define "runtimeclass-extender.issuerRef" -}}
{{- if .Values.certManager.issuerRef -}}
{{- toYaml .Values.certManager.issuerRef -}}
{{- else -}}
kind: Issuer
name: runtimeclass-extender-selfsigned
{{- end -}}
{{- end }}

{{/*
How pods that name a RuntimeClass are admitted (docs/pod-webhook.md): podAdmission.mode,
or for "auto" policy where the API server serves admissionregistration.k8s.io/v1
MutatingAdmissionPolicy (Kubernetes 1.36), else webhook. helm install and upgrade read
what the cluster serves; helm template knows only what --api-versions tells it.

The default-scheduler mode needs the policies (_validate.tpl refuses webhook, both
and none there, and runs first: every template that renders pod admission asks this);
auto choosing the webhook, which the values alone cannot show, fails the render too.
*/}}
{{- define "runtimeclass-extender.podAdmission" -}}
{{- include "runtimeclass-extender.validate" . -}}
{{- $mode := .Values.podAdmission.mode -}}
{{- if eq $mode "auto" -}}
{{- $mode = ternary "policy" "webhook" (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") -}}
{{- end -}}
{{- if and (include "runtimeclass-extender.defaultScheduler" .) (ne $mode "policy") -}}
{{- fail "mode=default-scheduler needs the pod admission policies, and podAdmission.mode auto chose the pod webhook: the API server does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36), and the pod webhook has no default-scheduler mode. On a 1.36 API server, helm template (and a GitOps tool) needs --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy, or set podAdmission.mode=policy; before 1.36, install predicate mode: --set mode=predicate (docs/install.md#which-mode-do-i-install)" -}}
{{- end -}}
{{- $mode -}}
{{- end }}

{{/*
"true" when the pod admission policies are rendered (components/pod-admission-policy).
*/}}
{{- define "runtimeclass-extender.podPolicies" -}}
{{- if has (include "runtimeclass-extender.podAdmission" .) (list "policy" "both") }}true{{ end -}}
{{- end }}

{{/*
"true" when the pod webhook is rendered (components/pod-webhook): for webhook and both.
*/}}
{{- define "runtimeclass-extender.podWebhook" -}}
{{- if has (include "runtimeclass-extender.podAdmission" .) (list "webhook" "both") }}true{{ end -}}
{{- end }}

{{/*
The documents of a YAML file under files/ (a byte copy of a component's), each with the
chart's labels, as kustomize's labels: field adds them. Called with (list $ "path").
*/}}
{{- define "runtimeclass-extender.documents" -}}
{{- $root := index . 0 -}}
{{- range $text := regexSplit "(?m)^---\\s*$" ($root.Files.Get (index . 1)) -1 }}
{{- $doc := fromYaml $text }}
{{- if $doc }}
{{- $_ := set $doc.metadata "labels" (include "runtimeclass-extender.labels" $root | fromYaml) }}
---
{{ toYaml $doc }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The dashboard's features (generate_dashboard.py's FEATURES, listed in
files/components/monitoring/dashboard-features.json) and whether this release turns
each on, as YAML. A feature the generator has and this does not, or the reverse, fails
the render.
*/}}
{{- define "runtimeclass-extender.dashboardFeatures" -}}
always: true
requeue: {{ include "runtimeclass-extender.requeue" . | eq "true" }}
labelNodes: {{ include "runtimeclass-extender.labelNodes" . | eq "true" }}
audit: {{ .Values.auditRunningPods.enabled }}
podWebhook: {{ include "runtimeclass-extender.podWebhook" . | eq "true" }}
leaderElection: {{ .Values.leaderElection.enabled }}
selfManagedCertificates: {{ not .Values.certManager.enabled }}
# The chart has no capture setting: its extender never captures.
capture: false
{{- end }}

{{/*
The Grafana dashboard of this release: dashboard.json (the monitoring component's whole
dashboard) without the panels and queries whose feature (dashboard-features.json) is
off, under the rows that keep a panel, laid out again as the generator's SDK lays out a
dashboard (generate_dashboard.py's build of the same features: rows full width, one
grid unit high; panels left to right, a new line once a line is 24 wide, each line as
high as its highest panel). Panels keep the ids they have in the whole dashboard.
*/}}
{{- define "runtimeclass-extender.dashboard" -}}
{{- $on := include "runtimeclass-extender.dashboardFeatures" . | fromYaml -}}
{{- $board := .Files.Get "files/components/monitoring/dashboard.json" | fromJson -}}
{{- $features := .Files.Get "files/components/monitoring/dashboard-features.json" | fromJson -}}
{{- if ne (keys $on | sortAlpha | join ",") ($features.features | join ",") -}}
{{- fail (printf "the dashboard's features are %s, the chart knows %s" ($features.features | join ",") (keys $on | sortAlpha | join ",")) -}}
{{- end -}}
{{- /* The rows, each with the panels (and queries) kept. */ -}}
{{- $rows := list -}}
{{- range $panel := $board.panels -}}
{{- if eq $panel.type "row" -}}
{{- $rows = append $rows (dict "row" $panel "panels" list) -}}
{{- else -}}
{{- $spec := get $features.panels (toString $panel.id) -}}
{{- if not $spec -}}
{{- fail (printf "dashboard-features.json has no panel %v" $panel.id) -}}
{{- end -}}
{{- if get $on $spec.feature -}}
{{- $targets := list -}}
{{- range $target := $panel.targets -}}
{{- if get $on (get $spec.targets $target.refId) -}}
{{- $targets = append $targets $target -}}
{{- end -}}
{{- end -}}
{{- $_ := set $panel "targets" $targets -}}
{{- $row := last $rows -}}
{{- $_ := set $row "panels" (append $row.panels $panel) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Laid out: x and y the next free place, height that of the line so far. */ -}}
{{- $panels := list -}}
{{- $x := 0 -}}
{{- $y := 0 -}}
{{- $height := 0 -}}
{{- range $rows -}}
{{- if .panels -}}
{{- $_ := set .row "gridPos" (dict "h" 1 "w" 24 "x" 0 "y" (add $y $height)) -}}
{{- $panels = append $panels .row -}}
{{- $x = 0 -}}
{{- $y = add $y $height 1 -}}
{{- $height = 0 -}}
{{- range $panel := .panels -}}
{{- $_ := set $panel.gridPos "x" $x -}}
{{- $_ := set $panel.gridPos "y" $y -}}
{{- $panels = append $panels $panel -}}
{{- $x = add $x $panel.gridPos.w -}}
{{- $height = max $height $panel.gridPos.h -}}
{{- if ge (int $x) 24 -}}
{{- $x = 0 -}}
{{- $y = add $y $height -}}
{{- $height = 0 -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set $board "panels" $panels -}}
{{- toPrettyJson $board }}
{{ end }}
