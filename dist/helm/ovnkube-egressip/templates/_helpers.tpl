{{/*
The one source of the names, probes and security contexts that every layout's objects share.
*/}}

{{- define "oeip.masterName" -}}ovnkube-egressip-master{{- end -}}
{{- define "oeip.nodeName" -}}ovnkube-egressip-node{{- end -}}

{{/* The layout, checked: centralized or interconnect. */}}
{{- define "oeip.layout" -}}
{{- if not (has .Values.layout (list "centralized" "interconnect")) -}}
{{- fail (printf "layout %q: want centralized or interconnect" .Values.layout) -}}
{{- end -}}
{{- .Values.layout -}}
{{- end -}}

{{- define "oeip.image" -}}{{ .repository }}:{{ .tag }}{{- end -}}

{{/*
NB over TLS (nbTLS), for the process that connects to NB (.addr: its --nb-address): the three flags (and
--nb-cert-common-name), the mount and the volume of the Secret. An ssl: address without nbTLS.secretName fails.
*/}}
{{- define "oeip.nbTLSCheck" -}}
{{- if and (contains "ssl:" .addr) (not .root.Values.nbTLS.secretName) -}}
{{- fail (printf "NB address %q is ssl: set nbTLS.secretName to the Secret with the client's key, certificate and CA certificate" .addr) -}}
{{- end -}}
{{- end -}}
{{- define "oeip.nbTLSArgs" -}}
{{- include "oeip.nbTLSCheck" . -}}
{{- with .root.Values.nbTLS -}}
{{- if .secretName -}}
- --nb-client-privkey=/ovn-cert/client-privkey.pem
- --nb-client-cert=/ovn-cert/client-cert.pem
- --nb-client-cacert=/ovn-cert/ca-cert.pem
{{- with .certCommonName }}
- --nb-cert-common-name={{ . }}
{{- end }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "oeip.nbTLSMount" -}}
{{- if .Values.nbTLS.secretName -}}
- name: nb-tls
  mountPath: /ovn-cert
  readOnly: true
{{- end -}}
{{- end -}}
{{- define "oeip.nbTLSVolume" -}}
{{- with .Values.nbTLS -}}
{{- if .secretName -}}
- name: nb-tls
  secret:
    secretName: {{ .secretName }}
    # Readable by the process' group only: root in the node pod, fsGroup (the image's 65532) in the master's.
    defaultMode: 0440
    items:
    - key: {{ .privkeyKey }}
      path: client-privkey.pem
    - key: {{ .certKey }}
      path: client-cert.pem
    - key: {{ .cacertKey }}
      path: ca-cert.pem
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Flags every ovnkube process of the chart takes, after its role flags (a YAML list). */}}
{{- define "oeip.commonArgs" -}}
- --config-file=/etc/ovnkube/ovnkube.conf
- --loglevel={{ .Values.logLevel }}
- --egressip-node-release-linger={{ .Values.releaseLinger }}
- --kube-api-qps={{ .Values.kubeAPI.qps }}
- --kube-api-burst={{ .Values.kubeAPI.burst }}
{{- end -}}

{{/* The flags of the leader-elected role (master or cluster manager): its Lease and the health check. */}}
{{- define "oeip.controlPlaneArgs" -}}
- --leader-elect-namespace={{ .Release.Namespace }}
- --leader-elect-name={{ .Values.leaderElection.name }}
- --leader-elect-lease-duration={{ .Values.leaderElection.leaseDuration }}
- --leader-elect-renew-deadline={{ .Values.leaderElection.renewDeadline }}
- --leader-elect-retry-period={{ .Values.leaderElection.retryPeriod }}
- --egressip-reachability-total-timeout={{ .Values.healthCheck.totalTimeout }}
- --egressip-reachability-interval={{ .Values.healthCheck.interval }}
{{- end -}}

{{/*
--metrics-bind-address on the port given (.port), when metrics are on; with metrics.pprof, --enable-pprof and
--pprof-bind-address on the profiles' port given (.pprofPort).
*/}}
{{- define "oeip.metricsArgs" -}}
{{- $args := list -}}
{{- if .root.Values.metrics.enabled -}}
{{- $args = append $args (printf "--metrics-bind-address=%s:%v" .root.Values.metrics.bindAddress .port) -}}
{{- end -}}
{{- if .root.Values.metrics.pprof -}}
{{- $args = concat $args (list "--enable-pprof" (printf "--pprof-bind-address=%s:%v" .root.Values.metrics.pprofBindAddress .pprofPort)) -}}
{{- end -}}
{{- with $args }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/*
The metrics port and the probes on it. /healthz: the process serves. /readyz: a master or cluster manager reaches
what it needs and stands by, or leads and its last sync succeeded; a node daemon's last sync programmed the host
(addresses, iptables; in shared gateway mode the node's annotations), so a node whose iptables cannot be written is
not Ready (docs/images.md).
*/}}
{{- define "oeip.portsAndProbes" -}}
{{- if .root.Values.metrics.enabled -}}
ports:
- name: metrics
  containerPort: {{ .port }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  periodSeconds: 5
{{- end -}}
{{- end -}}

{{/* The master and the cluster manager: non-root (the image's user 65532), no privilege, no capability. */}}
{{- define "oeip.controlPlaneSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* The node daemon: root in the host's network namespace, with the two capabilities addresses and iptables need. */}}
{{- define "oeip.nodeSecurityContext" -}}
securityContext:
  capabilities:
    add: ["NET_ADMIN", "NET_RAW"]
{{- end -}}

{{/* Restarts the pods when ovnkube.conf changes (helm upgrade of a setting). */}}
{{- define "oeip.configChecksum" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end -}}

{{- define "oeip.nodeSelector" -}}
{{- with . -}}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}
