"""validate.py — deploy/ checked offline, for tests/integration/deploy.sh.

Every Kubernetes object of deploy/k8s and of its L3 overlay against the API
server's schemas (kubernetes-validate, strict: unknown fields are errors), at
the oldest Kubernetes the manifests claim and at the newest the package
bundles; the Prometheus Operator's monitors against
tests/deploy/monitoring.schema.json (their CRDs ship in no PyPI package); the
Kustomize base and overlay list exactly their files and the overlay's patches
name objects of the base; every .Values path the Helm chart's templates read
is in its values.yaml. Prints TAP-style lines; exits 1 on any failure.

Runs in the virtual environment scripts/dev.sh makes from
tests/requirements-deploy.txt."""

import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

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


def documents(path: Path) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is not None:
            yield doc


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


def manifests(folder: Path) -> list[str]:
    return sorted(f.name for f in folder.glob("*.yaml") if f.name != "kustomization.yaml")


def check_base(report: Report, k8s: Path, monitors: dict[str, Any]) -> set[str]:
    """Validates the base's objects; returns their "Kind name"s."""
    files = manifests(k8s)
    names = set()
    for f in files:
        for obj in documents(k8s / f):
            validate_object(report, obj, f, monitors)
            names.add(name_of(obj))
    kust = yaml.safe_load((k8s / "kustomization.yaml").read_text())
    report.ok(sorted(kust["resources"]) == files,
              "kustomization.yaml lists exactly the manifests of deploy/k8s")
    return names


def check_l3_overlay(report: Report, l3: Path, base_names: set[str], monitors: dict[str, Any]) -> None:
    kust = yaml.safe_load((l3 / "kustomization.yaml").read_text())
    resources = kust.get("resources", [])
    patches = [p["path"] for p in kust.get("patches", [])]
    own = [r for r in resources if r != ".."]
    report.ok(".." in resources and sorted(own + patches) == manifests(l3),
              "l3/kustomization.yaml builds on the base and lists exactly its files")
    for r in own:
        for obj in documents(l3 / r):
            validate_object(report, obj, f"l3/{r}", monitors)
    for p in patches:
        obj = yaml.safe_load((l3 / p).read_text())
        report.ok(name_of(obj) in base_names, f"l3/{p} patches {name_of(obj)} of the base")


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
    k8s = deploy / "k8s"
    base_names = check_base(report, k8s, monitors)
    check_l3_overlay(report, k8s / "l3", base_names, monitors)
    check_chart(report, deploy / "helm" / "kvtier")
    print(f"{'FAILED' if report.failed else 'passed'}: {report.failed} failure(s)")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
