{{/* The name of the release's objects: the release name, or release-gantry. */}}
{{- define "gantry.fullname" -}}
{{- if contains "gantry" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gantry" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object but the server's pods, which add gantry.selectorLabels. */}}
{{- define "gantry.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "gantry.metaLabels" . }}
{{- end -}}

{{- define "gantry.metaLabels" -}}
app.kubernetes.io/name: gantry
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The server's pods; `app: gantry` becomes the scrape job (job="gantry") the alerts use. */}}
{{- define "gantry.selectorLabels" -}}
app: gantry
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "gantry.agentSelectorLabels" -}}
app.kubernetes.io/name: gantry-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "gantry.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "gantry.tlsSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{- required "tls.mode=secret needs tls.secretName: a Secret with tls.crt and tls.key" .Values.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "gantry.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The Service's DNS name, which the serving certificate must name. */}}
{{- define "gantry.serviceHost" -}}
{{- printf "%s.%s.svc" (include "gantry.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The directory `gantry serve --policy` watches. */}}
{{- define "gantry.policyDir" -}}
{{- if eq .Values.policy.source "gitSync" -}}
{{- printf "/git/current/%s" (trimPrefix "/" .Values.policy.gitSync.path) | trimSuffix "/" -}}
{{- else if eq .Values.policy.source "image" -}}
{{- .Values.policy.imagePath -}}
{{- else -}}
/etc/gantry/policy
{{- end -}}
{{- end -}}

{{- define "gantry.policyConfigMap" -}}
{{- if .Values.policy.existingConfigMap -}}
{{- .Values.policy.existingConfigMap -}}
{{- else if .Values.policy.files -}}
{{- printf "%s-policy" (include "gantry.fullname" .) -}}
{{- else -}}
{{- fail "policy.source=configMap needs policy.files (--set-file 'policy.files.main\\.gantry=PATH') or policy.existingConfigMap (kubectl create configmap NAME --from-file=DIR/)" -}}
{{- end -}}
{{- end -}}

{{/* The CA bundle for the webhooks in tls.mode=secret (cert-manager injects it otherwise). */}}
{{- define "gantry.caBundle" -}}
{{- if eq .Values.tls.mode "secret" }}
      caBundle: {{ required "tls.mode=secret needs tls.caBundle: the base64 PEM of the CA that signed tls.secretName" .Values.tls.caBundle }}
{{- end }}
{{- end -}}

{{/* git-sync's container; `oneTime` makes the init container that clones before gantry starts. */}}
{{- define "gantry.gitSync" -}}
{{- $g := .root.Values.policy.gitSync -}}
- name: {{ if .oneTime }}git-clone{{ else }}git-sync{{ end }}
  image: {{ $g.image }}
  args:
    - --repo={{ required "policy.source=gitSync needs policy.gitSync.repo" $g.repo }}
    - --ref={{ $g.ref }}
    - --root=/git
    - --link=current
    {{- if .oneTime }}
    - --one-time
    {{- else }}
    - --period={{ $g.period }}
    {{- end }}
    {{- if $g.sshSecret }}
    - --ssh-key-file=/etc/git-secret/ssh
    - --ssh-known-hosts-file=/etc/git-secret/known_hosts
    {{- end }}
  {{- if $g.credentialsSecret }}
  env:
    - name: GITSYNC_USERNAME
      valueFrom: { secretKeyRef: { name: {{ $g.credentialsSecret }}, key: username } }
    - name: GITSYNC_PASSWORD
      valueFrom: { secretKeyRef: { name: {{ $g.credentialsSecret }}, key: password } }
  {{- end }}
  securityContext:
    {{- toYaml .root.Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml $g.resources | nindent 4 }}
  volumeMounts:
    - { name: git, mountPath: /git }
    - { name: git-tmp, mountPath: /tmp }
    {{- if $g.sshSecret }}
    - { name: git-secret, mountPath: /etc/git-secret, readOnly: true }
    {{- end }}
{{- end -}}
