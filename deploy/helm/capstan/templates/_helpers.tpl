{{/* The chart name, or nameOverride: app.kubernetes.io/name. */}}
{{- define "capstan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release name
when it contains the chart name, else <release>-<chart>. Kept to 47
characters so that <fullname>-abort-reconciler stays a valid name.
*/}}
{{- define "capstan.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "capstan.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of every object; with a component, call capstan.componentLabels. */}}
{{- define "capstan.labels" -}}
helm.sh/chart: {{ include "capstan.chart" . }}
app.kubernetes.io/name: {{ include "capstan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: capstan
{{- end }}

{{/* capstan.componentLabels: (dict "ctx" $ "component" "api"). */}}
{{- define "capstan.componentLabels" -}}
{{ include "capstan.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* What selects a component's pods: (dict "ctx" $ "component" "api"). */}}
{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capstan.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* A pod template's labels: the selector's, part-of and the component's podLabels. */}}
{{- define "capstan.podLabels" -}}
{{ include "capstan.selectorLabels" . }}
app.kubernetes.io/part-of: capstan
{{- with .values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* An image reference: (dict "ctx" $ "image" .Values.api.image). */}}
{{- define "capstan.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{/* The Secret holding the tokens: existingSecret or the chart's. */}}
{{- define "capstan.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "capstan.fullname" .)) .Values.existingSecret }}
{{- end }}

{{/* Whether the chart writes the Secret <fullname>-db: a URL or a host is given. */}}
{{- define "capstan.chartDB" -}}
{{- if or .Values.postgres.url .Values.postgres.host }}true{{ end }}
{{- end }}

{{/* Whether the chart writes the Secret <fullname>-redis: a password is given. */}}
{{- define "capstan.chartRedis" -}}
{{- if or .Values.redis.password .Values.redis.sentinel.password }}true{{ end }}
{{- end }}

{{/* CAPSTAN_DATABASE_URL when the chart writes it. */}}
{{- define "capstan.databaseURL" -}}
{{- $pg := .Values.postgres }}
{{- if $pg.url }}
{{- $pg.url }}
{{- else }}
{{- printf "postgres://%s@%s:%v/%s?sslmode=%s" (urlquery $pg.user) $pg.host $pg.port $pg.database $pg.sslmode }}
{{- end }}
{{- end }}

{{/* The data of the Secret <fullname>-db (and of the migration's hook copy). */}}
{{- define "capstan.dbSecretData" -}}
CAPSTAN_DATABASE_URL: {{ include "capstan.databaseURL" . | quote }}
{{- if and (not .Values.postgres.url) .Values.postgres.password }}
PGPASSWORD: {{ .Values.postgres.password | quote }}
{{- end }}
{{- end }}

{{/*
The database settings of a container that uses Postgres, as env entries,
after an envFrom of <dbSecret> when capstan.chartDB: CAPSTAN_DATABASE_URL
from existingSecret when the chart writes none, and PGPASSWORD from
existingSecret when the URL has none and postgres.password is empty.
*/}}
{{- define "capstan.dbEnv" -}}
{{- $pg := .Values.postgres }}
{{- if not (include "capstan.chartDB" .) }}
{{- if not .Values.existingSecret }}
{{- fail "postgres: set postgres.url, postgres.host, or existingSecret with the key CAPSTAN_DATABASE_URL" }}
{{- end }}
- name: CAPSTAN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: CAPSTAN_DATABASE_URL
{{- else if and (not $pg.url) (not $pg.password) .Values.existingSecret $pg.existingSecretPasswordKey }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: {{ $pg.existingSecretPasswordKey }}
{{- end }}
{{- end }}

{{/* Redis's passwords from existingSecret, as env entries, where the values give none. */}}
{{- define "capstan.redisEnv" -}}
{{- $r := .Values.redis }}
{{- if and .Values.existingSecret (not $r.password) $r.existingSecretPasswordKey }}
- name: CAPSTAN_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: {{ $r.existingSecretPasswordKey }}
{{- end }}
{{- if and .Values.existingSecret (not $r.sentinel.password) $r.sentinel.existingSecretPasswordKey }}
- name: CAPSTAN_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret }}
      key: {{ $r.sentinel.existingSecretPasswordKey }}
{{- end }}
{{- end }}

{{/* One token from the tokens Secret: (dict "ctx" $ "key" "CAPSTAN_ADMIN_TOKEN"). */}}
{{- define "capstan.tokenEnv" -}}
- name: {{ .key }}
  valueFrom:
    secretKeyRef:
      name: {{ include "capstan.tokensSecret" .ctx }}
      key: {{ .key }}
{{- end }}

{{/*
envFrom of a service: the ConfigMap, then <fullname>-db when it uses
Postgres and the chart writes it, then <fullname>-redis when the chart
writes it. (dict "ctx" $ "postgres" true).
*/}}
{{- define "capstan.envFrom" -}}
{{- $full := include "capstan.fullname" .ctx -}}
- configMapRef:
    name: {{ $full }}-config
{{- if and .postgres (include "capstan.chartDB" .ctx) }}
- secretRef:
    name: {{ $full }}-db
{{- end }}
{{- if include "capstan.chartRedis" .ctx }}
- secretRef:
    name: {{ $full }}-redis
{{- end }}
{{- end }}

{{/*
Pod template annotations: checksums of the ConfigMap and of the Secrets the
chart writes, so that a change to either rolls the Deployments, and the
component's podAnnotations. (dict "ctx" $ "values" .Values.api).
*/}}
{{- define "capstan.podAnnotations" -}}
checksum/config: {{ include (print .ctx.Template.BasePath "/configmap.yaml") .ctx | sha256sum }}
checksum/secret: {{ include (print .ctx.Template.BasePath "/secrets.yaml") .ctx | sha256sum }}
{{- with .values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The scheduling fields of a pod spec: (dict "ctx" $ "values" .Values.api). */}}
{{- define "capstan.scheduling" -}}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A token from the values, else the one the Secret holds, else a new one: (dict "ctx" $ "key" ... "value" ...). */}}
{{- define "capstan.token" -}}
{{- if .value }}
{{- .value }}
{{- else }}
{{- $old := lookup "v1" "Secret" .ctx.Release.Namespace (include "capstan.tokensSecret" .ctx) }}
{{- $kept := dig "data" .key "" ($old | default dict) }}
{{- if $kept }}
{{- $kept | b64dec }}
{{- else }}
{{- printf "cap_%s" (randAlphaNum 43) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The executor's service account. */}}
{{- define "capstan.executorServiceAccount" -}}
{{- if .Values.executor.serviceAccount.create }}
{{- default (printf "%s-executor" (include "capstan.fullname" .)) .Values.executor.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.executor.serviceAccount.name }}
{{- end }}
{{- end }}
