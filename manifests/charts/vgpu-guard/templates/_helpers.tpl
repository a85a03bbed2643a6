{{/* Names ----------------------------------------------------------------------------------- */}}

{{- define "vgpu-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "vgpu-guard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "vgpu-guard.webhookName" -}}{{ include "vgpu-guard.fullname" . }}-webhook{{- end }}
{{- define "vgpu-guard.controllerName" -}}{{ include "vgpu-guard.fullname" . }}-controller{{- end }}
{{- define "vgpu-guard.cleanupName" -}}{{ include "vgpu-guard.fullname" . }}-cleanup{{- end }}
{{- define "vgpu-guard.configName" -}}{{ include "vgpu-guard.fullname" . }}-config{{- end }}
{{- define "vgpu-guard.tlsSecretName" -}}{{ include "vgpu-guard.fullname" . }}-tls{{- end }}
{{- define "vgpu-guard.leaseName" -}}{{ include "vgpu-guard.fullname" . }}-controller{{- end }}
{{/* Both webhook configurations (mutating and validating) carry this one name. */}}
{{- define "vgpu-guard.webhookConfigName" -}}{{ include "vgpu-guard.fullname" . }}{{- end }}
{{- define "vgpu-guard.certificateName" -}}{{ include "vgpu-guard.fullname" . }}-serving{{- end }}
{{- define "vgpu-guard.issuerName" -}}{{ include "vgpu-guard.fullname" . }}-selfsigned{{- end }}

{{/* Labels ---------------------------------------------------------------------------------- */}}

{{- define "vgpu-guard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "vgpu-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vgpu-guard
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "webhook") */}}
{{- define "vgpu-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vgpu-guard.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "vgpu-guard.componentLabels" -}}
{{ include "vgpu-guard.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Image ----------------------------------------------------------------------------------- */}}

{{- define "vgpu-guard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Checks that fail the render with a way out ---------------------------------------------- */}}

{{- define "vgpu-guard.checks" -}}
{{- if not (has .Values.certs.mode (list "builtin" "certManager")) }}
{{- fail (printf "certs.mode is %q; use builtin or certManager" .Values.certs.mode) }}
{{- end }}
{{- if not (has .Values.config.deviceConfig.source (list "builtin" "inline" "configMap")) }}
{{- fail (printf "config.deviceConfig.source is %q; use builtin, inline or configMap" .Values.config.deviceConfig.source) }}
{{- end }}
{{- if and (eq .Values.config.deviceConfig.source "inline") (not .Values.config.deviceConfig.inline.nvidia) }}
{{- fail "config.deviceConfig.source is inline but config.deviceConfig.inline has no nvidia: block; paste the plugin's device-config.yaml there" }}
{{- end }}
{{- if and .Values.webhooks.urlOverride (eq .Values.certs.mode "certManager") }}
{{- fail "webhooks.urlOverride points at a process outside the cluster, whose certificate cert-manager does not issue; use certs.mode=builtin with webhooks.caBundle" }}
{{- end }}
{{- if ge (int .Values.webhook.shutdownTimeoutSeconds) (int .Values.webhook.terminationGracePeriodSeconds) }}
{{- fail (printf "webhook.shutdownTimeoutSeconds (%v) must be below webhook.terminationGracePeriodSeconds (%v), or the kubelet kills in-flight admission requests" .Values.webhook.shutdownTimeoutSeconds .Values.webhook.terminationGracePeriodSeconds) }}
{{- end }}
{{- end }}

{{/* The vGPU resource names a GPU pod requests (the device config's names plus extras). */}}
{{- define "vgpu-guard.vgpuResourceNames" -}}
{{- $nvidia := dict }}
{{- if eq .Values.config.deviceConfig.source "inline" }}
{{- $nvidia = default (dict) .Values.config.deviceConfig.inline.nvidia }}
{{- end }}
{{- $names := list
  (default "volcano.sh/vgpu-number" $nvidia.resourceCountName)
  (default "volcano.sh/vgpu-memory" $nvidia.resourceMemoryName)
  (default "volcano.sh/vgpu-memory-percentage" $nvidia.resourceMemoryPercentageName)
  (default "volcano.sh/vgpu-cores" $nvidia.resourceCoreName) }}
{{- concat $names .Values.webhooks.extraVgpuResourceNames | uniq | toJson }}
{{- end }}

{{/* CEL list literal of the names: ['a', 'b'] */}}
{{- define "vgpu-guard.celNames" -}}
{{- $out := list }}
{{- range (include "vgpu-guard.vgpuResourceNames" . | fromJsonArray) }}
{{- $out = append $out (printf "'%s'" .) }}
{{- end }}
{{- printf "[%s]" (join ", " $out) }}
{{- end }}

{{/*
CEL: does the pod spec at .spec (a CEL path such as object.spec) request any vGPU resource in a
container or init container, in limits or requests? Every field access is guarded by has(), since
an evaluation error would apply the webhook's failurePolicy.
(dict "ctx" $ "spec" "object.spec")
*/}}
{{- define "vgpu-guard.celSpecRequestsVgpu" -}}
{{- $names := include "vgpu-guard.celNames" .ctx }}
{{- $c := printf "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r in %s)) || (has(c.resources.requests) && c.resources.requests.exists(r, r in %s)))" $names $names }}
{{- printf "((has(%s.containers) && %s.containers.exists(c, %s)) || (has(%s.initContainers) && %s.initContainers.exists(c, %s)))" .spec .spec $c .spec .spec $c }}
{{- end }}

{{- define "vgpu-guard.celAllocationAnnotations" -}}
{{- include "vgpu-guard.celAllocationAnnotationsOf" "object" }}
{{- end }}

{{/* CEL: does the object at the given CEL path (object, oldObject) carry an allocation annotation? */}}
{{- define "vgpu-guard.celAllocationAnnotationsOf" -}}
has({{ . }}.metadata.annotations) && {{ . }}.metadata.annotations.exists(k, k in ['volcano.sh/vgpu-node', 'volcano.sh/vgpu-time', 'volcano.sh/vgpu-ids-new', 'volcano.sh/devices-to-allocate', 'volcano.sh/bind-phase', 'volcano.sh/bind-time', 'vgpu-guard.io/allocation'])
{{- end }}

{{/*
CEL: is this write a Binding, through either door: pods/binding, or the legacy bindings resource
(POST namespaces/NS/bindings, no subresource)? (The API server leaves request.subResource out when
it is empty, hence has().)
*/}}
{{- define "vgpu-guard.celBinding" -}}
(request.resource.resource == 'bindings' || (has(request.subResource) && request.subResource == 'binding'))
{{- end }}

{{/*
CEL: does this write carry a GPU assignment onto the pod (the ledger arbiter's writes)? A Binding
with vgpu-ids-new or devices-to-allocate (Volcano >= 1.16), or a pod UPDATE that adds or changes
vgpu-ids-new (Volcano 1.10-1.15's patch, checked there and reserved at its plain Binding). The
device plugin's bind-phase confirmation and its consumption of devices-to-allocate change no
assignment and do not match.
*/}}
{{- define "vgpu-guard.celAssignmentWritten" -}}
({{ include "vgpu-guard.celBinding" . }} && has(object.metadata.annotations) && ('volcano.sh/vgpu-ids-new' in object.metadata.annotations || 'volcano.sh/devices-to-allocate' in object.metadata.annotations)) || (request.operation == 'UPDATE' && request.resource.resource == 'pods' && has(object.metadata.annotations) && 'volcano.sh/vgpu-ids-new' in object.metadata.annotations && !(has(oldObject.metadata.annotations) && 'volcano.sh/vgpu-ids-new' in oldObject.metadata.annotations && oldObject.metadata.annotations['volcano.sh/vgpu-ids-new'] == object.metadata.annotations['volcano.sh/vgpu-ids-new']))
{{- end }}

{{/* The writes through which an assignment reaches a pod (both allocation webhook entries): pod
UPDATE, pods/status, and a Binding through either door (a tenant allowed to create bindings but not
pods/binding must not bind past the arbiter). */}}
{{- define "vgpu-guard.podAllocationRules" -}}
- apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["pods", "pods/status"]
  operations: ["UPDATE"]
  scope: Namespaced
- apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["pods/binding", "bindings"]
  operations: ["CREATE"]
  scope: Namespaced
{{- end }}

{{/* The namespaces of both allocation webhook entries (exempt namespaces stay in: forgery checks). */}}
{{- define "vgpu-guard.podAllocationNamespaces" -}}
{{- $w := .Values.webhooks }}
{{- if $w.validatePodAllocations.namespaceSelector }}
{{- toYaml $w.validatePodAllocations.namespaceSelector }}
{{- else }}
{{- include "vgpu-guard.namespaceSelector" (dict "ctx" . "exempt" false) }}
{{- end }}
{{- end }}

{{/* Gang members (Volcano sets this annotation on the pods of a PodGroup). */}}
{{- define "vgpu-guard.celGangMember" -}}
has(object.metadata.annotations) && 'scheduling.k8s.io/group-name' in object.metadata.annotations
{{- end }}

{{/*
How pods reach the pod webhooks: "matchConditions" (every namespace, only GPU pods are sent, CEL; beta
and on by default from 1.28), "allNamespaces" (every namespace but the excluded ones, every pod: for
servers without matchConditions, which drop the field silently) or "namespaceOptIn" (only
namespaces labelled <optInLabel>=enabled, every pod there). auto: matchConditions from 1.28, else
allNamespaces, so a default install guards every namespace on every version.
*/}}
{{- define "vgpu-guard.podScope" -}}
{{- $scope := .Values.webhooks.scope }}
{{- if eq $scope "auto" }}
{{- if semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version }}matchConditions{{ else }}allNamespaces{{ end }}
{{- else if has $scope (list "matchConditions" "allNamespaces" "namespaceOptIn") }}
{{- $scope }}
{{- else }}
{{- fail (printf "webhooks.scope: %q is not one of auto, matchConditions, allNamespaces, namespaceOptIn" $scope) }}
{{- end }}
{{- end }}

{{/*
failurePolicy of a pod CREATE webhook (mutatePods, validatePods): (dict "ctx" $ "value" .failurePolicy).
"auto" fails closed where the scope is narrow (matchConditions: only GPU pods; namespaceOptIn: only
opted-in namespaces) and open in allNamespaces, where every pod of every namespace is sent and an
outage would stop every pod creation in the cluster's workloads.
*/}}
{{- define "vgpu-guard.podFailurePolicy" -}}
{{- if eq .value "auto" }}
{{- if eq (include "vgpu-guard.podScope" .ctx) "allNamespaces" }}Ignore{{ else }}Fail{{ end }}
{{- else if has .value (list "Fail" "Ignore") }}
{{- .value }}
{{- else }}
{{- fail (printf "a pod webhook's failurePolicy is %q; use auto, Fail or Ignore" .value) }}
{{- end }}
{{- end }}

{{/*
timeoutSeconds of a pod CREATE webhook: (dict "ctx" $ "value" .timeoutSeconds "policy" "Fail").
"auto": 3 when it fails open (a short wait per pod while we are down), 5 when it fails closed.
*/}}
{{- define "vgpu-guard.podTimeout" -}}
{{- if eq (toString .value) "auto" }}
{{- if eq .policy "Ignore" }}3{{ else }}5{{ end }}
{{- else }}
{{- int .value }}
{{- end }}
{{- end }}

{{/*
The namespaces every webhook's namespaceSelector keeps out by kubernetes.io/metadata.name (the
excluded ones, ours, the exempt ones), as a JSON list: what the 1.20 name-label hook labels.
*/}}
{{- define "vgpu-guard.nameLabelledNamespaces" -}}
{{- $v := .Values }}
{{- concat $v.webhooks.excludedNamespaces (list .Release.Namespace) (default (list) $v.config.admission.exemptNamespaces) | uniq | toJson }}
{{- end }}

{{/*
The generated namespaceSelector: excluded namespaces (always ours), the admin's exempt namespaces
(config.admission.exemptNamespaces; only with "exempt" true: the pod validation and allocation
webhooks still see them, the engine skips everything there but the allocation checks), and in the
namespaceOptIn scope the opt-in label. No label opts a namespace out: whoever could set it could
forge GPU assignments. (dict "ctx" $ "exempt" true)
*/}}
{{- define "vgpu-guard.namespaceSelector" -}}
{{- $v := .ctx.Values }}
{{- $excluded := concat $v.webhooks.excludedNamespaces (list .ctx.Release.Namespace) }}
{{- if .exempt }}
{{- $excluded = concat $excluded (default (list) $v.config.admission.exemptNamespaces) }}
{{- end }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ toJson ($excluded | uniq) }}
  {{- if eq (include "vgpu-guard.podScope" .ctx) "namespaceOptIn" }}
  - key: {{ $v.webhooks.optInLabel }}
    operator: In
    values: ["enabled"]
  {{- end }}
{{- end }}

{{/* clientConfig of one webhook: (dict "ctx" $ "path" "/mutate/pods" "override" .clientConfig) */}}
{{- define "vgpu-guard.clientConfig" -}}
{{- $v := .ctx.Values }}
{{- if .override }}
{{- toYaml .override }}
{{- else if $v.webhooks.urlOverride }}
url: {{ printf "%s%s" (trimSuffix "/" $v.webhooks.urlOverride) .path | quote }}
{{- with $v.webhooks.caBundle }}
caBundle: {{ . | quote }}
{{- end }}
{{- else }}
service:
  name: {{ include "vgpu-guard.webhookName" .ctx }}
  namespace: {{ .ctx.Release.Namespace }}
  path: {{ .path | quote }}
  port: 443
{{- with $v.webhooks.caBundle }}
caBundle: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Preferred anti-affinity on the hostname: (dict "ctx" $ "component" "webhook" "values" .Values.webhook) */}}
{{- define "vgpu-guard.affinity" -}}
{{- if .values.affinity }}
{{- toYaml .values.affinity }}
{{- else if .values.antiAffinity.enabled }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "vgpu-guard.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
{{- end }}
{{- end }}

{{/* Container-level hardening shared by every container. */}}
{{- define "vgpu-guard.containerSecurityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* Environment every vgpu-guard process reads (see README "Process interface"). */}}
{{- define "vgpu-guard.processEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: VGPU_GUARD_CERT_MODE
  value: {{ ternary "builtin" "files" (eq .Values.certs.mode "builtin") | quote }}
- name: VGPU_GUARD_TLS_SECRET
  value: {{ include "vgpu-guard.tlsSecretName" . | quote }}
- name: VGPU_GUARD_WEBHOOK_SERVICE
  value: {{ include "vgpu-guard.webhookName" . | quote }}
- name: VGPU_GUARD_CLUSTER_DOMAIN
  value: {{ .Values.certs.clusterDomain | quote }}
- name: VGPU_GUARD_CERT_EXTRA_DNS
  value: {{ join "," .Values.certs.extraDNSNames | quote }}
- name: VGPU_GUARD_CA_VALIDITY
  value: {{ .Values.certs.builtin.caValidity | quote }}
- name: VGPU_GUARD_SERVING_VALIDITY
  value: {{ .Values.certs.builtin.servingValidity | quote }}
- name: VGPU_GUARD_SERVING_RENEW_BEFORE
  value: {{ .Values.certs.builtin.servingRenewBefore | quote }}
- name: VGPU_GUARD_CA_RENEW_BEFORE
  value: {{ .Values.certs.builtin.caRenewBefore | quote }}
- name: VGPU_GUARD_CERT_CHECK_INTERVAL
  value: {{ .Values.certs.builtin.checkInterval | quote }}
{{- end }}
