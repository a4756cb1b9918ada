"""Checks a rendered kustomization (one multi-document YAML file) beyond its schemas.

Custom resources: the fields their CRDs require (InferencePool v1 from
kubernetes-sigs/gateway-api-inference-extension config/crd/bases/
inference.networking.k8s.io_inferencepools.yaml: selector.matchLabels, exactly one
targetPorts entry, the endpoint picker's name; HTTPRoute and ServiceMonitor: what routes or
scrapes anything). How the pieces fit: the Service, PodDisruptionBudget and InferencePool select
the server pods; their ports are the container's; the probes ask /health (readiness) and the
TCP port (liveness, so a draining pod is not killed); the grace period covers preStop plus
--shutdown-grace; the HPA scales the Deployment; the pods run as non-root.

Usage: check_manifests.py RENDERED.yaml   (exits nonzero with one line per problem)
"""

import sys

import yaml

problems = []


def check(cond, message):
    if not cond:
        problems.append(message)


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def arg_value(args, flag):
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)

deployments = by_kind.get("Deployment", [])
check(len(deployments) == 1, f"want one Deployment, found {len(deployments)}")
dep = deployments[0]
pod = dep["spec"]["template"]
pod_labels = pod["metadata"]["labels"]
check(matches(dep["spec"]["selector"]["matchLabels"], pod_labels), "Deployment selector misses its pods")
server = next(c for c in pod["spec"]["containers"] if c["name"] == "oxllm")
ports = {p.get("name"): p["containerPort"] for p in server["ports"]}
args = server.get("args", [])
check(args[:1] == ["serve"], f"the container does not run `serve`: {args}")
port = int(arg_value(args, "--port") or 8000)
check(port in ports.values(), f"--port {port} is not a container port {ports}")
check(arg_value(args, "--host") == "0.0.0.0", "--host must be 0.0.0.0 to be reachable")

ready = server.get("readinessProbe", {}).get("httpGet", {})
check(ready.get("path") == "/health", "readiness must ask /health (503 while draining)")
live = server.get("livenessProbe", {})
check("tcpSocket" in live, "liveness must be a TCP check: /health is 503 while draining")
check(server.get("startupProbe", {}).get("httpGet", {}).get("path") == "/health", "startup probe must ask /health")

grace = int(arg_value(args, "--shutdown-grace") or 30)
pre_stop = server.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
sleep = int(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0
termination = pod["spec"].get("terminationGracePeriodSeconds", 30)
check(termination >= sleep + grace + 1,
      f"terminationGracePeriodSeconds {termination} < preStop {sleep} + --shutdown-grace {grace}")

sec = pod["spec"].get("securityContext", {})
check(sec.get("runAsNonRoot") is True and sec.get("runAsUser", 0) != 0, "pods must run as non-root")
mounts = {m["mountPath"] for m in server.get("volumeMounts", [])}
cache = next((e["value"] for e in server.get("env", []) if e["name"] == "OXLLM_CACHE"), None)
check(cache in mounts, f"OXLLM_CACHE {cache} is not a mounted volume {mounts}")
req = server.get("resources", {}).get("requests", {})
check("cpu" in req and "memory" in req, "the server needs CPU and memory requests")
threads = arg_value(args, "--threads")
check(threads is not None and str(req.get("cpu")) == threads, f"--threads {threads} != CPU request {req.get('cpu')}")
annotations = pod["metadata"].get("annotations", {})
check(annotations.get("prometheus.io/path") == "/metrics" and annotations.get("prometheus.io/port") == str(port),
      "Prometheus annotations must point at /metrics on the server port")

for svc in by_kind.get("Service", []):
    check(matches(svc["spec"]["selector"], pod_labels), f"Service {svc['metadata']['name']} selects no server pod")
    for p in svc["spec"]["ports"]:
        target = p.get("targetPort", p["port"])
        check(target in ports or target in ports.values(), f"Service port {target} is no container port")

for pdb in by_kind.get("PodDisruptionBudget", []):
    check(matches(pdb["spec"]["selector"]["matchLabels"], pod_labels), "PodDisruptionBudget selects no server pod")

for hpa in by_kind.get("HorizontalPodAutoscaler", []):
    ref = hpa["spec"]["scaleTargetRef"]
    check(ref["kind"] == "Deployment" and ref["name"] == dep["metadata"]["name"], "the HPA scales something else")
    names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    check("vllm_num_requests_waiting" in names, f"the HPA does not scale on waiting requests: {names}")

for pool in by_kind.get("InferencePool", []):
    spec = pool.get("spec", {})
    check(pool["apiVersion"] == "inference.networking.k8s.io/v1", "InferencePool must be v1")
    check(matches(spec.get("selector", {}).get("matchLabels"), pod_labels), "InferencePool selects no server pod")
    targets = spec.get("targetPorts", [])
    check(len(targets) == 1 and targets[0].get("number") == port, f"InferencePool targetPorts {targets} != [{port}]")
    picker = spec.get("endpointPickerRef", {})
    check(bool(picker.get("name")), "InferencePool needs endpointPickerRef.name")
    check(picker.get("failureMode", "FailClose") in ("FailOpen", "FailClose"), "bad failureMode")
    check(1 <= picker.get("port", {}).get("number", 9002) <= 65535, "bad endpoint picker port")

pools = {p["metadata"]["name"] for p in by_kind.get("InferencePool", [])}
for route in by_kind.get("HTTPRoute", []):
    refs = [b for r in route["spec"]["rules"] for b in r.get("backendRefs", [])]
    check(bool(route["spec"].get("parentRefs")), "HTTPRoute needs a parent Gateway")
    check(any(b.get("kind") == "InferencePool" and b["name"] in pools for b in refs),
          "HTTPRoute does not send to the InferencePool")

svc_names = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
for sm in by_kind.get("ServiceMonitor", []):
    sel = sm["spec"]["selector"]["matchLabels"]
    check(any(matches(sel, s["metadata"].get("labels", {})) for s in svc_names.values()),
          "ServiceMonitor selects no Service")
    check(any(e.get("path") == "/metrics" for e in sm["spec"]["endpoints"]), "ServiceMonitor does not scrape /metrics")

for p in problems:
    print(f"{sys.argv[1]}: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
