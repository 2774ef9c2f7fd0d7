{{/*
Values the chart refuses, each with what to change; every problem found is
reported at once. values.schema.json checks the shapes (types, patterns,
unknown keys); these are the checks across values and against the cluster.
*/}}
{{- define "ipam-operator.validate" -}}
{{- $problems := list -}}
{{- $v := .Values -}}

{{- if not $v.clusterName -}}
{{- $problems = append $problems "clusterName: set it to a name of this cluster's own (it tags every interface the operator creates; the leaked-interface GC deletes only interfaces with this cluster's tag)" -}}
{{- else if eq $v.clusterName "default" -}}
{{- $problems = append $problems "clusterName: \"default\" is shared by every cluster left at the default, and one cluster's leaked-interface GC would delete another's interfaces: give this cluster a name of its own" -}}
{{- end -}}

{{- $names := list "aws" "azure" "mock" "custom" -}}
{{- if not (has $v.provider.name $names) -}}
{{- $problems = append $problems (printf "provider.name: say which provider module provider.module is: aws, azure, mock or custom (got %q)" $v.provider.name) -}}
{{- end -}}

{{- $module := $v.provider.module -}}
{{- if not $module -}}
{{- $problems = append $problems "provider.module: set the provider module, an OCI artifact pinned by digest: oci://REGISTRY/REPO@sha256:HEX (`cargo xtask images` pushes the providers and prints their digests)" -}}
{{- else if not (regexMatch "^oci://[^@\\s]+@sha256:[0-9a-f]{64}$" $module) -}}
{{- $problems = append $problems (printf "provider.module: %q is not pinned by digest: give oci://REGISTRY/REPO@sha256:HEX (a tag can move; the manifest digest cannot)" $module) -}}
{{- end -}}

{{- $cloud := include "ipam-operator.cloud" . -}}
{{- if and (eq $v.provider.name "mock") (ne $cloud "generic") -}}
{{- $problems = append $problems (printf "provider.cloud: the mock provider talks to its own example cloud, not %s: leave provider.cloud empty (generic), or set provider.name and provider.module to the %s provider" $cloud $cloud) -}}
{{- end -}}
{{- if and (has $v.provider.name (list "aws" "azure")) (ne $cloud $v.provider.name) -}}
{{- $problems = append $problems (printf "provider.cloud: the %s provider talks to %s, not %s: leave provider.cloud empty or set it to %s" $v.provider.name $v.provider.name $cloud $v.provider.name) -}}
{{- end -}}
{{- if and $v.provider.awsCredentials $v.provider.azureCredentials -}}
{{- $problems = append $problems "provider.awsCredentials and provider.azureCredentials: choose one" -}}
{{- end -}}

{{- if $v.agent.enabled -}}
{{- if $v.cilium.agent -}}
{{- $problems = append $problems "agent.enabled: cilium-agent runs on the nodes (cilium.agent: true) and already hands pod addresses out of the pools; two agents would hand out the same addresses. Set cilium.agent: false on a cluster without cilium-agent, or agent.enabled: false" -}}
{{- end -}}
{{- $agentCloud := include "ipam-operator.agentCloud" . -}}
{{- $expected := ternary "none" $cloud (eq $cloud "generic") -}}
{{- if ne $agentCloud $expected -}}
{{- $problems = append $problems (printf "agent.cloud: %s, but the operator's cloud is %s: the agent must describe nodes of the cloud the provider manages; leave agent.cloud empty (it follows provider.cloud) or set it to %s" $agentCloud $cloud $expected) -}}
{{- end -}}
{{- if and $v.agent.nodeRestriction.enabled (semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version) -}}
{{- $problems = append $problems (printf "agent.nodeRestriction.enabled: the admission policy needs Kubernetes 1.30 or later (admissionregistration.k8s.io/v1 and the node-name claim in service account tokens), this cluster is %s: set agent.nodeRestriction.enabled: false (the agent's RBAC then lets it write any CiliumNode)" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if eq (clean $v.agent.stateDir) (clean $v.agent.socketDir) -}}
{{- $problems = append $problems "agent.stateDir and agent.socketDir: give the state a directory of its own (the default is /run/ipam-agent/state, inside the socket's /run/ipam-agent)" -}}
{{- end -}}
{{- end -}}

{{- with $v.podDisruptionBudget -}}
{{- if .enabled -}}
{{- $min := toString .minAvailable -}}
{{- $max := toString .maxUnavailable -}}
{{- if and (ne $min "") (ne $max "") -}}
{{- $problems = append $problems "podDisruptionBudget: set minAvailable or maxUnavailable, not both (set the other to \"\")" -}}
{{- else if and (eq $min "") (eq $max "") -}}
{{- $problems = append $problems "podDisruptionBudget: set minAvailable or maxUnavailable (or enabled: false)" -}}
{{- else if or (eq $max "0") (eq $max "0%") -}}
{{- $problems = append $problems "podDisruptionBudget.maxUnavailable: 0 blocks every drain (node upgrades would hang): allow at least 1" -}}
{{- else if eq $min "100%" -}}
{{- $problems = append $problems "podDisruptionBudget.minAvailable: 100% blocks every drain (node upgrades would hang): lower it below replicaCount" -}}
{{- else if and (regexMatch "^[0-9]+$" $min) (ge (int $min) (int $v.replicaCount)) -}}
{{- $problems = append $problems (printf "podDisruptionBudget.minAvailable: %s of %d replicas blocks every drain (node upgrades would hang): lower it below replicaCount, or raise replicaCount" $min (int $v.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- if $problems -}}
{{- fail (printf "\n  - %s" (join "\n  - " $problems)) -}}
{{- end -}}
{{- end }}
