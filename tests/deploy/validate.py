"""validate.py — deploy/ checked offline, for tests/integration/deploy.sh.

The Kustomize base and each overlay rendered by `kubectl kustomize`, as
`kubectl apply -k` would send them (merged, patches applied), and every
rendered object against the API server's schemas (kubernetes-validate,
strict: unknown fields are errors), at the oldest Kubernetes the manifests
claim and at the newest the package bundles; the Prometheus Operator's
PodMonitor against tests/deploy/monitoring.schema.json (its CRD ships in no
PyPI package). On the merged Deployment: kvtierd once, as the native sidecar
(an init container with an image), every volume a container mounts defined,
and in the L3 overlay the L3 volume mounted into the sidecar with l3-path in
its config. Every .Values path the Helm chart's templates read is in its
values.yaml. Prints TAP-style lines; exits 1 on any failure.

Runs in the virtual environment scripts/dev.sh makes from
tests/requirements-deploy.txt, with kubectl (any with kustomize: >= 1.20)
on PATH."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

# vllm-deployment.yaml's native sidecar (restartPolicy: Always in
# initContainers) needs 1.29; the newest is what a user applies to today.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")


class Report:
    def __init__(self) -> None:
        self.failed = 0

    def ok(self, cond: bool, what: str) -> None:
        print(f"{'ok' if cond else 'not ok'} - {what}")
        if not cond:
            self.failed += 1


def name_of(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"


def validate_object(report: Report, obj: dict[str, Any], where: str, monitors: dict[str, Any]) -> None:
    kind = obj.get("kind")
    if kind in MONITOR_KINDS and obj.get("apiVersion") == "monitoring.coreos.com/v1":
        schema = dict(monitors[kind], definitions=monitors["definitions"])
        try:
            jsonschema.validate(obj, schema)
            report.ok(True, f"{where}: {name_of(obj)} is a valid {obj['apiVersion']} {kind}")
        except jsonschema.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path)
            report.ok(False, f"{where}: {name_of(obj)}: {path}: {e.message}")
        return
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            report.ok(True, f"{where}: {name_of(obj)} is a valid {obj.get('apiVersion')} {kind} "
                      f"(Kubernetes {version})")
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path)
            report.ok(False, f"{where}: {name_of(obj)} (Kubernetes {version}): {path}: {e.message}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
            report.ok(False, f"{where}: {name_of(obj)}: {e.message}")


def render(report: Report, kustomization: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize` renders from kustomization, [] when it fails (reported)."""
    run = subprocess.run(["kubectl", "kustomize", str(kustomization)], capture_output=True, text=True)
    report.ok(run.returncode == 0,
              f"kubectl kustomize {kustomization.name} renders" +
              ("" if run.returncode == 0 else f": {run.stderr.strip()[-400:]}"))
    return [d for d in yaml.safe_load_all(run.stdout) if d] if run.returncode == 0 else []


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    deployments = [o for o in objs if o.get("kind") == "Deployment"]
    return deployments[0]["spec"]["template"]["spec"] if len(deployments) == 1 else {}


def check_pod(report: Report, where: str, spec: dict[str, Any]) -> None:
    """kvtierd once, as an init container with an image; every mounted volume defined."""
    inits, mains = spec.get("initContainers", []), spec.get("containers", [])
    sidecars = [c for c in inits + mains if c.get("name") == "kvtierd"]
    report.ok(len(sidecars) == 1 and sidecars[0] in inits and bool(sidecars[0].get("image")) and
              sidecars[0].get("restartPolicy") == "Always",
              f"{where}: kvtierd is in the pod once, as a native sidecar with an image")
    volumes = {v["name"] for v in spec.get("volumes", [])}
    mounted = {m["name"] for c in inits + mains for m in c.get("volumeMounts", [])}
    report.ok(mounted <= volumes, f"{where}: every volume mounted is defined ({sorted(mounted - volumes)} not)")
    report.ok(spec.get("securityContext", {}).get("fsGroup") == 65532,
              f"{where}: the pod's fsGroup lets the sidecar's uid write the L2 volume")
    # The stock vLLM image gets the package: a volume an init container fills, on PYTHONPATH.
    vllm = next((c for c in mains if c.get("name") == "vllm"), {})
    path = next((e["value"] for e in vllm.get("env", []) if e["name"] == "PYTHONPATH"), "")
    volume = next((m["name"] for m in vllm.get("volumeMounts", []) if m["mountPath"] == path), None)
    filled = any(c.get("name") == "kvtier-python" and c.get("image") == sidecars[0].get("image") and
                 any(m["name"] == volume for m in c.get("volumeMounts", []))
                 for c in inits if sidecars)
    # (In any order among the init containers: vLLM starts after all of them.)
    report.ok(bool(volume) and filled,
              f"{where}: vLLM's PYTHONPATH ({path}) is a volume an init container of the kvtierd image fills")


def config_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    for o in objs:
        if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "kvtierd-config":
            return json.loads(o["data"]["kvtierd.json"])
    return {}


def check_kustomize(report: Report, k8s: Path, monitors: dict[str, Any]) -> None:
    if not shutil.which("kubectl"):
        report.ok(False, "kubectl is on PATH (scripts/dev.sh installs Debian's kubernetes-client)")
        return
    rendered = {}
    for name, path in (("base", k8s / "base"), ("overlays/l3", k8s / "overlays" / "l3"),
                       ("overlays/monitoring", k8s / "overlays" / "monitoring")):
        rendered[name] = render(report, path)
        for obj in rendered[name]:
            validate_object(report, obj, name, monitors)
        check_pod(report, name, pod_spec(rendered[name]))
    report.ok(not any(o.get("kind") == "Secret" for o in rendered["base"]),
              "base: no Secret is shipped (the admin token is the user's)")
    report.ok(not any(o.get("kind") in MONITOR_KINDS for o in rendered["base"]),
              "base: no monitor, whose CRDs a cluster may lack")
    report.ok([o["kind"] for o in rendered["overlays/monitoring"] if o.get("kind") in MONITOR_KINDS] ==
              ["PodMonitor"], "overlays/monitoring: one monitor")
    spec = pod_spec(rendered["overlays/l3"])
    sidecar = next((c for c in spec.get("initContainers", []) if c.get("name") == "kvtierd"), {})
    report.ok(any(m["name"] == "kvtier-l3" for m in sidecar.get("volumeMounts", [])),
              "overlays/l3: the L3 volume is mounted into the sidecar")
    report.ok("l3-path" in config_of(rendered["overlays/l3"]) and
              "l3-path" not in config_of(rendered["base"]), "overlays/l3: the config has l3-path")


VALUES_PATH = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+)+)")
VALUES_ALIAS = re.compile(r"\$(\w+) := \.Values((?:\.[A-Za-z0-9_]+)+)")


def values_paths(template: str) -> set[str]:
    """The .Values paths a template reads, through `$v := .Values.a` aliases too."""
    used = {m.group(1)[1:] for m in VALUES_PATH.finditer(template)}
    for alias in VALUES_ALIAS.finditer(template):
        base = alias.group(2)[1:]
        for m in re.finditer(rf"\${alias.group(1)}((?:\.[A-Za-z0-9_]+)+)", template):
            used.add(base + m.group(1))
    return used


def check_chart(report: Report, chart: Path) -> None:
    values = yaml.safe_load((chart / "values.yaml").read_text())
    used: set[str] = set()
    for t in sorted((chart / "templates").iterdir()):
        used |= values_paths(t.read_text())
    for path in sorted(used):
        v: Any = values
        for key in path.split("."):
            v = v.get(key) if isinstance(v, dict) else None
        report.ok(v is not None, f"values.yaml has {path}")
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    report.ok(meta.get("apiVersion") == "v2" and meta.get("name") == "kvtier" and bool(meta.get("version")),
              "Chart.yaml names the chart, API v2, with a version")


def main(deploy: Path) -> int:
    report = Report()
    monitors = json.loads((Path(__file__).parent / "monitoring.schema.json").read_text())
    check_kustomize(report, deploy / "k8s", monitors)
    check_chart(report, deploy / "helm" / "kvtier")
    print(f"{'FAILED' if report.failed else 'passed'}: {report.failed} failure(s)")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
