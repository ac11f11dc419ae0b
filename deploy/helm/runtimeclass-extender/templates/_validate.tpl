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
{{- $labelNodes := include "runtimeclass-extender.labelNodes" . -}}
{{- $defaultScheduler := include "runtimeclass-extender.defaultScheduler" . -}}
{{- $tls := $v.tls.enabled -}}
{{- $podAdmission := $v.podAdmission.mode -}}
{{- $requeue := $v.requeuePendingPods.enabled -}}
{{- if and $labelNodes (eq $podAdmission "none") -}}
{{- $problems = append $problems "the node labels (labelNodes, or mode=default-scheduler) need pod admission (podAdmission.mode auto, policy, webhook or both, not none): it gives each pod of a class its class's node label requirement" -}}
{{- end -}}
{{- if and $v.nodeAutoscaling.enabled (not $labelNodes) -}}
{{- $problems = append $problems "nodeAutoscaling.enabled=true in predicate mode needs labelNodes.enabled=true: cluster-autoscaler and Karpenter never call the extender (kubernetes/autoscaler#506), so without the class's label in its pods they add no node for a pending pod of a RuntimeClass, which pends for good. Set labelNodes.enabled=true, or mode=default-scheduler if you configure no kube-scheduler (docs/autoscaling.md)" -}}
{{- end -}}
{{- if and $tls $defaultScheduler -}}
{{- $problems = append $problems "mode=default-scheduler runs no kube-scheduler: tls.enabled=true (mutual TLS between kube-scheduler and the extender, deploy/overlays/tls) is predicate mode's (set mode=predicate)" -}}
{{- else if and $tls $labelNodes -}}
{{- $problems = append $problems "tls.enabled=true and labelNodes.enabled=true: no shipped scheduler configuration has both" -}}
{{- end -}}
{{- if and $defaultScheduler (eq (toString $v.labelNodes.enabled) "false") -}}
{{- $problems = append $problems "mode=default-scheduler places the pods by the node labels the extender keeps: labelNodes.enabled=false leaves it nothing to place them by (leave it null)" -}}
{{- end -}}
{{- if and $defaultScheduler (not (has $podAdmission (list "auto" "policy"))) -}}
{{- $problems = append $problems (printf "mode=default-scheduler needs pod admission by the policies (podAdmission.mode auto or policy, not %s): they give each pod its class's node label requirement and mark it admitted for the mode's guard, and the pod webhook has no default-scheduler mode" $podAdmission) -}}
{{- end -}}
{{- if and $defaultScheduler (eq (toString $requeue) "true") -}}
{{- $problems = append $problems "mode=default-scheduler has no requeueing: requeuePendingPods nudges the pending pods of runtimeclass-scheduler, and no pod waits for it there (leave requeuePendingPods.enabled null, or false)" -}}
{{- end -}}
{{- if not $v.leaderElection.enabled -}}
{{- $acting := list -}}
{{- if $v.auditRunningPods.enabled }}{{ $acting = append $acting "auditRunningPods.enabled=true" }}{{ end -}}
{{- if $labelNodes }}{{ $acting = append $acting "the node labels (labelNodes, or mode=default-scheduler)" }}{{ end -}}
{{- if has $podAdmission (list "auto" "policy" "both") }}{{ $acting = append $acting (printf "podAdmission.mode=%s (the pod admission table; webhook or none keep none)" $podAdmission) }}{{ end -}}
{{- if not $v.certManager.enabled }}{{ $acting = append $acting "certManager.enabled=false (the leader renews the self-managed webhook certificates)" }}{{ end -}}
{{- if include "runtimeclass-extender.requeue" . }}{{ $acting = append $acting "requeueing (predicate mode requeues unless requeuePendingPods.enabled=false)" }}{{ end -}}
{{- if $acting -}}
{{- $problems = append $problems (printf "leaderElection.enabled=false leaves no replica to act, and these need one: %s" (join ", " $acting)) -}}
{{- end -}}
{{- end -}}
{{- if $problems -}}
{{- fail (printf "these values do not go together (docs/install.md#install-with-helm):\n- %s" (join "\n- " $problems)) -}}
{{- end -}}
{{- end -}}
