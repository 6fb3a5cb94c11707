#!/usr/bin/env bash
# `make demo`: the whole product on this machine, from nothing to an injected pod.
#
#   scripts/demo.sh          build what is missing (once), start the one-node cluster, build and
#                            load the images, install the chart with the results service, run a
#                            sample app in namespace `demo` (labelled debug=enabled) with a
#                            schedule (perf every minute), wait for its first run and print how
#                            to open the results page and what to try next
#   scripts/demo.sh down     stop the cluster and everything it started (`make demo-down`)
#
# Needs root (bridge, iptables, containerd). The first run builds Kubernetes 1.20 from Debian's
# source package (~7-10 min) and the images (several minutes); later runs reuse both.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="$root/.venv/bin/python"
[ -x "$python" ] || python=python3
version="0.1.0"
webhook_image="localhost/sidecar-debug/webhook:$version"
toolset_image="localhost/sidecar-debug/toolset:$version"
sample_image="localhost/sidecar-debug/sample-node:$version"
cluster() { "$python" -m tests.cluster "$@"; }
started=$(date +%s)
step() { printf '\n==> [%s, +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - started ))" "$*" >&2; }

if [ "${1:-}" = "down" ]; then
  cluster down --mode full
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: the one-node cluster needs root (bridge, iptables, containerd)" >&2
  exit 1
fi

step "1/8 host packages, Kubernetes 1.20.2 binaries (first run: ~7-10 min), helm and kubectl"
bash scripts/cluster-deps.sh
tools="$(bash scripts/fetch-helm-kubectl.sh)"
export PATH="$tools:$PATH"

step "2/8 images: webhook, toolset, sample app (skipped when their inputs are unchanged)"
bash scripts/images.sh webhook
bash scripts/images.sh toolset
sample="node"
if [ -f samples/node/Dockerfile ]; then
  bash scripts/images.sh samples
else
  sample="python"   # no Node.js sample in this checkout: a Python hot loop on the webhook image
fi

step "3/8 one-node cluster (etcd, apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy)"
KUBECONFIG="$(cluster up --mode full | tail -1)"
export KUBECONFIG

step "4/8 importing the images into the node's containerd"
images=("$webhook_image" "$toolset_image")
[ "$sample" = node ] && images+=("$sample_image")
cluster load-image --mode full "${images[@]}"

step "5/8 helm install sidecar-debug with the results service (namespace sidecar-debug)"
# The one-node cluster has no storage provisioner: the demo keeps runs on an emptyDir.
helm upgrade --install sidecar-debug charts/sidecar-debug -n sidecar-debug --create-namespace \
  -f charts/sidecar-debug/ci/local-images-values.yaml \
  --set webhook.image.tag="$version" --set toolset.image.tag="$version" \
  --set webhook.replicaCount=1 --set webhook.podDisruptionBudget.enabled=false \
  --set results.enabled=true --set results.persistence.enabled=false \
  --set controller.intervalSeconds=10 \
  --wait --timeout 8m

step "6/8 namespace demo (debug=enabled), a schedule (perf, every minute) and the sample app"
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace demo debug=enabled --overwrite >/dev/null
kubectl annotate namespace demo --overwrite >/dev/null sidecar-debug.io/schedule='{"cron": "* * * * *", "duration": "10s", "selector": {"matchLabels": {"app": "fib"}}}'
# The privileged `full` profile (perf, bpftrace) needs the RBAC grant; without it the webhook
# downgrades to `lttng`. Grant it to the app's service account:
kubectl create rolebinding demo-debug-full -n demo --clusterrole=sidecar-debug-profile-full \
  --serviceaccount=demo:default --dry-run=client -o yaml | kubectl apply -f - >/dev/null
if [ "$sample" = node ]; then
  app_image="$sample_image"
  app_command='["node", "/app/app.js"]'
  runtime="node"
else
  app_image="$webhook_image"
  app_command='["python3", "-c", "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\nwhile True:\n    fibonacci(27)\n"]'
  runtime="python"
fi
kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fib
  namespace: demo
spec:
  replicas: 1
  selector:
    matchLabels: {app: fib}
  template:
    metadata:
      labels: {app: fib}
      annotations:
        sidecar-debug.io/runtime: $runtime
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: app
          image: $app_image
          imagePullPolicy: Never
          command: $app_command
          resources:
            requests: {cpu: 100m, memory: 64Mi}
EOF

step "7/8 waiting for the injected pod"
kubectl rollout status deployment/fib -n demo --timeout=5m
pod="$(kubectl get pods -n demo -l app=fib -o jsonpath='{.items[0].metadata.name}')"
kubectl get pod "$pod" -n demo \
  -o custom-columns='POD:.metadata.name,CONTAINERS:.spec.containers[*].name,SHARED_PID:.spec.shareProcessNamespace,STATUS:.status.phase'
echo
kubectl get pod "$pod" -n demo -o jsonpath='{.metadata.annotations.sidecar-debug\.io/status}'
echo

step "8/8 waiting for the schedule's first run (the toolset records perf and pushes it)"
first=""
for _ in $(seq 1 60); do
  first="$(kubectl logs -n sidecar-debug deployment/sidecar-debug-results 2>/dev/null \
    | grep -o 'stored demo/[^ ]* ([0-9]* samples)' | head -1 || true)"
  [ -n "$first" ] && break
  sleep 5
done
echo "${first:-no run yet (see: kubectl logs -n sidecar-debug deployment/sidecar-debug-results)}"
cat <<EOF

Demo ready in $(( $(date +%s) - started ))s. The results page (a perf run every minute):
  export KUBECONFIG=$KUBECONFIG PATH=$tools:\$PATH
  $root/.venv/bin/sidecar-debug results open       # then open http://127.0.0.1:8080/
Next:
  kubectl exec -it -n demo $pod -c debug-toolset -- bash        # a shell beside the app
  kubectl exec -n demo $pod -c debug-toolset -- ps -ef          # the app's processes
  kubectl exec -n demo $pod -c debug-toolset -- doctor          # what this pod can trace
  $root/.venv/bin/sidecar-debug flamegraph -n demo --seconds 10 -o flamegraph.html $pod
                                                                # perf from the sidecar -> flamegraph.html here
  $root/.venv/bin/sidecar-debug --help                          # trace, doctor, attach, inject...
  make demo-down                                                # stop it all
EOF
