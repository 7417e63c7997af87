#!/usr/bin/env bash
# kube-deps.sh {build|start|stop|status|env}
#
# A real, private Kubernetes control plane on loopback for the tests of the
# kubernetes plugin: etcd 3.6, kube-apiserver, kube-scheduler and
# kube-controller-manager, with kwok simulating one node and driving Pods
# through their phases (no kubelet, no container runtime). Every binary is
# built from the Go modules under tools/kube (their go.sum pins every byte)
# into a cache folder keyed by those modules and the Go version, so only the
# first build is slow (minutes); later ones find it. State lives under
# .data/kube and etcd's data on /dev/shm. Idempotent: a second `start` is a
# no-op. `env` prints KUBECONFIG and CAPSTAN_KUBE_* for the tests; `start`
# prints them too, with CAPSTAN_KUBE_STARTED=1 when it started the cluster
# (0 when it was running), so whoever started it knows to stop it.
#
# Environment (defaults):
#   CAPSTAN_KUBE_APISERVER_PORT=56443   CAPSTAN_KUBE_ETCD_PORT=52379
#   CAPSTAN_KUBE_KWOK_PORT=56250        CAPSTAN_DATA_DIR=<repo>/.data
#   CAPSTAN_KUBE_BIN_DIR=<Go cache dir>/../capstan-kube/<key>
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
data=${CAPSTAN_DATA_DIR:-$root/.data}
dir=$data/kube
api_port=${CAPSTAN_KUBE_APISERVER_PORT:-56443}
etcd_port=${CAPSTAN_KUBE_ETCD_PORT:-52379}
etcd_peer_port=$((etcd_port + 1))
kwok_port=${CAPSTAN_KUBE_KWOK_PORT:-56250}
mods=$root/tools/kube
k8s_version=v1.34.4
node=kwok-node-0

log() { printf 'kube-deps: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# bin_dir prints the folder of the built binaries: one per content of the
# tools/kube modules and Go version, so a version bump builds anew.
bin_dir() {
  if [ -n "${CAPSTAN_KUBE_BIN_DIR:-}" ]; then echo "$CAPSTAN_KUBE_BIN_DIR"; return; fi
  local key
  key=$( { go version; cat "$mods"/*/go.mod "$mods"/*/go.sum; } | sha256sum | cut -c1-16)
  echo "$(dirname "$(go env GOCACHE)")/capstan-kube/$key"
}

binaries=(etcd kube-apiserver kube-scheduler kube-controller-manager kwok)

built() {
  local b d; d=$(bin_dir)
  for b in "${binaries[@]}"; do [ -x "$d/$b" ] || return 1; done
}

# build compiles the five binaries into bin_dir, each module on its own
# (GOWORK=off: the services' workspace never sees these dependencies).
build() {
  command -v go >/dev/null || die "go is not on PATH: it builds the test cluster's binaries"
  local d; d=$(bin_dir)
  if built; then log "binaries in $d"; return; fi
  log "building etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok into $d (first time: minutes)"
  mkdir -p "$d.tmp"
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=34 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  ( cd "$mods/etcd" && GOWORK=off GOFLAGS=-mod=readonly go build -ldflags "-s -w" -o "$d.tmp/etcd" go.etcd.io/etcd/server/v3 ) ||
    die "building etcd failed (tools/kube/etcd); the kubernetes plugin's tests need it"
  ( cd "$mods/kubernetes" && GOWORK=off GOFLAGS=-mod=readonly go build -ldflags "$ldflags" -o "$d.tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager ) ||
    die "building the Kubernetes control plane failed (tools/kube/kubernetes); the kubernetes plugin's tests need it"
  ( cd "$mods/kwok" && GOWORK=off GOFLAGS=-mod=readonly go build -ldflags "-s -w" -o "$d.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok ) ||
    die "building kwok failed (tools/kube/kwok); the kubernetes plugin's tests need it"
  rm -rf "$d"; mv "$d.tmp" "$d"
  log "built into $d"
}

token=capstan-kube-admin-token
etcd_dir=/dev/shm/capstan-kube-etcd-$etcd_port

pid_alive() { [ -s "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

# api_get prints the API server's answer to GET $1 (admin token), failing
# on an HTTP error.
api() { curl -fsS --max-time 5 -k -H "Authorization: Bearer $token" "$@"; }
api_get() { api "https://127.0.0.1:$api_port$1"; }

# launch runs a binary in the background, its own session, output to
# $dir/<name>.log and its pid in $dir/<name>.pid.
launch() {
  local name=$1; shift
  setsid "$@" >"$dir/$name.log" 2>&1 < /dev/null 9>&- & # the start lock stays with start
  echo $! >"$dir/$name.pid"
}

# wait_for polls $2 (a command) for up to $3 seconds until it succeeds;
# on timeout it shows the tail of $1's log and fails.
wait_for() {
  local name=$1 cmd=$2 secs=$3 i
  for i in $(seq 1 $((secs * 10))); do
    eval "$cmd" >/dev/null 2>&1 && return 0
    pid_alive "$name" || { log "$name exited; its log:"; tail -n 20 "$dir/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  log "$name did not become ready in ${secs}s; its log:"; tail -n 20 "$dir/$name.log" >&2; exit 1
}

# certs makes, once, the API server's and kwok's self-signed serving
# certificates, the service-account key pair and the static token file.
certs() {
  mkdir -p "$dir"
  [ -s "$dir/sa.key" ] && return
  command -v openssl >/dev/null || die "openssl is needed to make the test cluster's certificates"
  local n
  for n in apiserver kwok; do
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=capstan-kube-$n" \
      -addext "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" \
      -keyout "$dir/$n.key" -out "$dir/$n.crt" >/dev/null 2>&1 || die "openssl could not make the $n certificate"
  done
  openssl genrsa -out "$dir/sa.key.tmp" 2048 >/dev/null 2>&1 && openssl rsa -in "$dir/sa.key.tmp" -pubout -out "$dir/sa.pub" >/dev/null 2>&1 ||
    die "openssl could not make the service-account key pair"
  echo "$token,admin,admin,system:masters" >"$dir/tokens.csv"
  mv "$dir/sa.key.tmp" "$dir/sa.key"
}

kubeconfig() {
  cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: capstan-kube
  cluster:
    server: https://127.0.0.1:$api_port
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $token
contexts:
- name: capstan-kube
  context: {cluster: capstan-kube, user: admin}
current-context: capstan-kube
KC
}

# kwok_config writes kwok's stages and its log source. Nodes: kwok's
# node-initialize and heartbeat-with-lease. Pods: ready as soon as they are
# scheduled (kwok's pod-ready), deleted at once when deleted (kwok's
# pod-delete, without dropping finalizers), and ended by capstan-complete:
# a Running Pod's container ends after its env KWOK_RUN_TIME (a Go
# duration, default 0s) with exit code KWOK_EXIT_CODE (default 0; not 0:
# phase Failed), reason KWOK_REASON (default Completed or Error) and
# termination message KWOK_TERMINATION_MESSAGE. A Pending Pod whose
# KWOK_WAITING_REASON is set (ErrImagePull, ImagePullBackOff) stays
# Pending with its container waiting for that reason. Every container's
# log is $dir/pod.log.
kwok_config() {
  local kdir=$root/tools/kube/kwok/stages
  { cat "$kdir"/*.yaml; cat <<KW
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: capstan-logs
spec:
  selector: {}
  logs:
  - containers: []
    logsFile: $dir/pod.log
    follow: false
KW
  } >"$dir/kwok.yaml"
  printf '%s stdout F hello from kwok\n%s stderr F warning from kwok\n' \
    "2026-01-01T00:00:00.000000000Z" "2026-01-01T00:00:00.000000001Z" >"$dir/pod.log"
}

node_json() {
  cat <<NODE
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$node","annotations":{"kwok.x-k8s.io/node":"fake","node.alpha.kubernetes.io/ttl":"0"},
 "labels":{"kubernetes.io/hostname":"$node","kubernetes.io/os":"linux","kubernetes.io/arch":"amd64","type":"kwok"}},
 "spec":{},
 "status":{"allocatable":{"cpu":"64","memory":"256Gi","pods":"5000"},"capacity":{"cpu":"64","memory":"256Gi","pods":"5000"},
 "nodeInfo":{"architecture":"amd64","operatingSystem":"linux","kubeletVersion":"$k8s_version","kubeProxyVersion":"$k8s_version"}}}
NODE
}

start() {
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9 # one start at a time: test processes start it concurrently
  if pid_alive kube-apiserver && api_get /readyz >/dev/null 2>&1; then log "already running on 127.0.0.1:$api_port"; return; fi
  started=1
  build
  stop_all 2>/dev/null || true
  certs; kubeconfig; kwok_config
  local d; d=$(bin_dir)
  log "starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok on 127.0.0.1:$api_port"
  rm -rf "$etcd_dir"; mkdir -p "$etcd_dir"
  launch etcd "$d/etcd" --name capstan --data-dir "$etcd_dir" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "capstan=http://127.0.0.1:$etcd_peer_port" --log-level warn
  wait_for etcd "curl -fsS --max-time 1 http://127.0.0.1:$etcd_port/health" 30
  launch kube-apiserver "$d/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$dir/apiserver.crt" --tls-private-key-file "$dir/apiserver.key" \
    --token-auth-file "$dir/tokens.csv" --authorization-mode Node,RBAC \
    --service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/16 \
    --kubelet-preferred-address-types InternalIP --endpoint-reconciler-type none \
    --enable-priority-and-fairness=false --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    --event-ttl 10m -v 0
  wait_for kube-apiserver "api_get /readyz" 60
  launch kube-controller-manager "$d/kube-controller-manager" --kubeconfig "$dir/kubeconfig" --leader-elect=false \
    --secure-port 0 --service-account-private-key-file "$dir/sa.key" --root-ca-file "$dir/apiserver.crt" \
    --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle,-route' \
    --kube-api-qps 500 --kube-api-burst 1000 --concurrent-gc-syncs 50 -v 0
  launch kube-scheduler "$d/kube-scheduler" --kubeconfig "$dir/kubeconfig" --leader-elect=false \
    --secure-port 0 --kube-api-qps 1000 --kube-api-burst 2000 -v 0
  launch kwok "$d/kwok" --kubeconfig "$dir/kubeconfig" --config "$dir/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip 127.0.0.1 --node-port "$kwok_port" --server-address "127.0.0.1:$kwok_port" \
    --tls-cert-file "$dir/kwok.crt" --tls-private-key-file "$dir/kwok.key" --node-lease-duration-seconds 40
  api -X POST -H 'Content-Type: application/json' --data "$(node_json)" \
    "https://127.0.0.1:$api_port/api/v1/nodes" >/dev/null || die "could not create the fake node"
  wait_for kwok "api_get /api/v1/nodes/$node | grep -q '\"type\": \"Ready\",' && api_get /api/v1/nodes/$node | grep -q '\"status\": \"True\"'" 60
  wait_for kube-controller-manager "api_get /api/v1/namespaces/default/serviceaccounts/default" 60
  wait_for kube-scheduler "! api_get /api/v1/nodes/$node | grep -q node.kubernetes.io/not-ready" 60
  log "ready: KUBECONFIG=$dir/kubeconfig"
}

stop_all() {
  local n
  for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if pid_alive "$n"; then log "stopping $n"; kill "$(cat "$dir/$n.pid")" 2>/dev/null || true; fi
  done
  for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    for _ in $(seq 1 100); do pid_alive "$n" || break; sleep 0.1; done
    pid_alive "$n" && kill -9 "$(cat "$dir/$n.pid")" 2>/dev/null || true
    rm -f "$dir/$n.pid"
  done
  rm -rf "$etcd_dir"
}

print_env() {
  echo "KUBECONFIG=$dir/kubeconfig"
  echo "CAPSTAN_KUBE_NODE=$node"
}

status() {
  local n
  for n in "${binaries[@]}"; do
    pid_alive "$n" && echo "$n: running (pid $(cat "$dir/$n.pid"))" || echo "$n: stopped"
  done
}

case "${1:-start}" in
  build) build ;;
  start) started=0; start; print_env; echo "CAPSTAN_KUBE_STARTED=$started" ;;
  stop) stop_all ;;
  status) status ;;
  env) print_env ;;
  *) echo "usage: $0 {build|start|stop|status|env}" >&2; exit 2 ;;
esac
