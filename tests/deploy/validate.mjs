// validate.mjs — checks deploy/ offline, for tests/integration/deploy.sh:
// every Kubernetes object of deploy/k8s against the API schemas (the
// kubernetes-models package, Prometheus Operator's for the monitors), the
// Kustomize base's resource list, and that every .Values path the Helm
// chart's templates use is in its values.yaml. Prints TAP-style lines.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments, parse } from "yaml";
import { Deployment, DaemonSet } from "kubernetes-models/apps/v1";
import {
  ConfigMap, Secret, Service, PersistentVolume, PersistentVolumeClaim,
} from "kubernetes-models/v1";
import { StorageClass } from "kubernetes-models/storage.k8s.io/v1";
import { ServiceMonitor, PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";

const models = {
  "apps/v1/Deployment": Deployment, "apps/v1/DaemonSet": DaemonSet,
  "v1/ConfigMap": ConfigMap, "v1/Secret": Secret, "v1/Service": Service,
  "v1/PersistentVolume": PersistentVolume, "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "storage.k8s.io/v1/StorageClass": StorageClass,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
  "monitoring.coreos.com/v1/PodMonitor": PodMonitor,
};

const deploy = process.argv[2];
let failed = 0;
const ok = (cond, what) => {
  console.log(`${cond ? "ok" : "not ok"} - ${what}`);
  if (!cond) failed++;
};

// Types, required fields and formats, as the API server's schemas have them
// (they do not reject unknown fields: yamllint and review catch those).
function validate(doc, where) {
  const Model = models[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) return ok(false, `${where}: no schema for ${doc.apiVersion} ${doc.kind}`);
  try {
    new Model(doc).validate();
    ok(true, `${where}: ${doc.kind} ${doc.metadata.name} is a valid ${doc.apiVersion} ${doc.kind}`);
  } catch (e) {
    ok(false, `${where}: ${doc.kind} ${doc.metadata?.name}: ${e.message.split("\n").slice(0, 4).join(" ")}`);
  }
}

const k8s = join(deploy, "k8s");
const files = readdirSync(k8s).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
for (const f of files) {
  const docs = parseAllDocuments(readFileSync(join(k8s, f), "utf8"));
  for (const d of docs) {
    if (d.errors.length) { ok(false, `${f}: ${d.errors[0].message}`); continue; }
    validate(d.toJS(), f);
  }
}
const kust = parse(readFileSync(join(k8s, "kustomization.yaml"), "utf8"));
const listed = new Set(kust.resources);
ok(files.every((f) => listed.has(f)) && kust.resources.every((r) => files.includes(r)),
  "kustomization.yaml lists exactly the manifests of deploy/k8s");

// The L3 overlay (deploy/k8s/l3): its new objects against the schemas; its
// patches name objects of the base, and it lists exactly its files.
const l3 = join(k8s, "l3");
const l3kust = parse(readFileSync(join(l3, "kustomization.yaml"), "utf8"));
const l3files = readdirSync(l3).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
const patches = l3kust.patches.map((p) => p.path);
ok(l3kust.resources.includes("..") &&
  l3files.every((f) => l3kust.resources.includes(f) || patches.includes(f)) &&
  [...l3kust.resources.filter((r) => r !== ".."), ...patches].every((r) => l3files.includes(r)),
  "l3/kustomization.yaml builds on the base and lists exactly its files");
for (const r of l3kust.resources.filter((r) => r !== ".."))
  for (const d of parseAllDocuments(readFileSync(join(l3, r), "utf8"))) validate(d.toJS(), `l3/${r}`);
const baseNames = new Set(files.flatMap((f) => parseAllDocuments(readFileSync(join(k8s, f), "utf8"))
  .map((d) => d.toJS()).filter((o) => o).map((o) => `${o.kind}/${o.metadata.name}`)));
for (const p of patches) {
  const o = parse(readFileSync(join(l3, p), "utf8"));
  ok(baseNames.has(`${o.kind}/${o.metadata.name}`), `l3/${p} patches ${o.kind} ${o.metadata.name} of the base`);
}

// The chart: every .Values path its templates read exists in values.yaml.
const chart = join(deploy, "helm", "kvtier");
const values = parse(readFileSync(join(chart, "values.yaml"), "utf8"));
const tdir = join(chart, "templates");
const used = new Set();
for (const f of readdirSync(tdir)) {
  const text = readFileSync(join(tdir, f), "utf8");
  for (const m of text.matchAll(/\.Values((?:\.[A-Za-z0-9_]+)+)/g)) used.add(m[1].slice(1));
  // $v := .Values.a.b, then $v.c
  for (const m of text.matchAll(/\$(\w+) := \.Values((?:\.[A-Za-z0-9_]+)+)/g)) {
    const base = m[2].slice(1);
    for (const n of text.matchAll(new RegExp(`\\$${m[1]}((?:\\.[A-Za-z0-9_]+)+)`, "g")))
      used.add(base + n[1]);
  }
}
for (const path of [...used].sort()) {
  let v = values;
  for (const k of path.split(".")) v = v === undefined || v === null ? undefined : v[k];
  ok(v !== undefined, `values.yaml has ${path}`);
}
const chartMeta = parse(readFileSync(join(chart, "Chart.yaml"), "utf8"));
ok(chartMeta.apiVersion === "v2" && chartMeta.name === "kvtier" && chartMeta.version,
  "Chart.yaml names the chart, API v2, with a version");
console.log(`${failed ? "FAILED" : "passed"}: ${failed} failure(s)`);
process.exit(failed ? 1 : 0);
