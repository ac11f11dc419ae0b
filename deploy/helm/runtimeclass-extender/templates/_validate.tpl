{{- /*
The combinations of values no overlay ships, refused with what each means and what to
set instead. values.schema.json checks each value on its own (keys, types, enums); the
rules between values live here, because a schema's refusal can only say "value must be
false" at one key. Every broken rule is listed in one message. Included by
deployment.yaml, which every release renders.
*/ -}}
{{- define "runtimeclass-extender.validate" -}}
{{- $v := .Values -}}
{{- $problems := list -}}
{{- $labelNodes := $v.labelNodes.enabled -}}
{{- $defaultScheduler := eq $v.labelNodes.placement "default-scheduler" -}}
{{- $tls := $v.tls.enabled -}}
{{- $podAdmission := $v.podAdmission.mode -}}
{{- $requeue := $v.requeuePendingPods.enabled -}}
{{- if and $labelNodes (eq $podAdmission "none") -}}
{{- $problems = append $problems "labelNodes.enabled=true needs pod admission (podAdmission.mode auto, policy, webhook or both, not none): it gives each pod of a class its class's node label requirement" -}}
{{- end -}}
{{- if and $labelNodes (ne $v.mode "predicate") -}}
{{- $problems = append $problems (printf "labelNodes.enabled=true is large-cluster mode, which is predicate mode (deploy/overlays/large-cluster): set mode=predicate, not %s" $v.mode) -}}
{{- end -}}
{{- if and $v.nodeAutoscaling.enabled (eq $v.mode "predicate") (not $labelNodes) -}}
{{- $problems = append $problems "nodeAutoscaling.enabled=true in predicate mode needs labelNodes.enabled=true: cluster-autoscaler and Karpenter never call the extender (kubernetes/autoscaler#506), so without the class's label in its pods they add no node for a pending pod of a RuntimeClass, which pends for good. Set labelNodes.enabled=true (with labelNodes.placement=default-scheduler to run no second scheduler), or mode=alongside-admission for classes whose rules are their scheduling.nodeSelector alone (docs/autoscaling.md)" -}}
{{- end -}}
{{- if and $tls (ne $v.mode "predicate") -}}
{{- $problems = append $problems "tls.enabled=true is deploy/overlays/tls, predicate mode: no shipped configuration has HTTPS alongside admission (set mode=predicate)" -}}
{{- end -}}
{{- if and $tls $labelNodes (not $defaultScheduler) -}}
{{- $problems = append $problems "tls.enabled=true and labelNodes.enabled=true: no shipped scheduler configuration has both" -}}
{{- end -}}
{{- if and $defaultScheduler (not $labelNodes) -}}
{{- $problems = append $problems "labelNodes.placement=default-scheduler needs labelNodes.enabled=true: the default scheduler places the pods of a RuntimeClass by the node labels the extender keeps (deploy/overlays/default-scheduler)" -}}
{{- end -}}
{{- if and $defaultScheduler (not (has $podAdmission (list "auto" "policy"))) -}}
{{- $problems = append $problems (printf "labelNodes.placement=default-scheduler needs pod admission by the policies (podAdmission.mode auto or policy, not %s): they give each pod its class's node label requirement and mark it admitted for the placement's guard, and the pod webhook has no default-scheduler placement" $podAdmission) -}}
{{- end -}}
{{- if and $defaultScheduler $tls -}}
{{- $problems = append $problems "labelNodes.placement=default-scheduler runs no kube-scheduler: tls.enabled=true (mutual TLS between kube-scheduler and the extender) has no scheduler to talk to" -}}
{{- end -}}
{{- if and $defaultScheduler (eq (toString $requeue) "true") -}}
{{- $problems = append $problems "labelNodes.placement=default-scheduler has no requeueing: requeuePendingPods nudges the pending pods of runtimeclass-scheduler, and no pod waits for it there (leave requeuePendingPods.enabled null, or false)" -}}
{{- end -}}
{{- if not $v.leaderElection.enabled -}}
{{- $acting := list -}}
{{- if $v.auditRunningPods.enabled }}{{ $acting = append $acting "auditRunningPods.enabled=true" }}{{ end -}}
{{- if $labelNodes }}{{ $acting = append $acting "labelNodes.enabled=true" }}{{ end -}}
{{- if has $podAdmission (list "auto" "policy" "both") }}{{ $acting = append $acting (printf "podAdmission.mode=%s (the pod admission table; webhook or none keep none)" $podAdmission) }}{{ end -}}
{{- if not $v.certManager.enabled }}{{ $acting = append $acting "certManager.enabled=false (the leader renews the self-managed webhook certificates)" }}{{ end -}}
{{- if or (eq (toString $requeue) "true") (and (eq $v.mode "predicate") (not (eq (toString $requeue) "false"))) }}{{ $acting = append $acting "requeueing (predicate mode requeues unless requeuePendingPods.enabled=false)" }}{{ end -}}
{{- if $acting -}}
{{- $problems = append $problems (printf "leaderElection.enabled=false leaves no replica to act, and these need one: %s" (join ", " $acting)) -}}
{{- end -}}
{{- end -}}
{{- if $problems -}}
{{- fail (printf "these values do not go together (docs/install.md#install-with-helm):\n- %s" (join "\n- " $problems)) -}}
{{- end -}}
{{- end -}}
