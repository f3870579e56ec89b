// Validates Kubernetes manifests against the Kubernetes API's JSON schemas (npm
// kubernetes-models: types, required fields, enums, int32/quantity formats of every built-in
// kind). Usage: node validate-k8s.mjs FILE.yaml... (multi-document YAML; "-" = stdin).
// Custom resources have no schema here: their apiVersion/kind must be in KNOWN_CRDS and only
// the object's shape (metadata.name, spec object) is checked. Unknown fields are NOT reported
// (the Kubernetes schemas do not forbid them); the API server's strict field validation would.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const KNOWN_CRDS = new Set([
  "inference.sagemaker.aws.amazon.com/v1/InferenceEndpointConfig",
  "inference.sagemaker.aws.amazon.com/v1alpha1/InferenceEndpointConfig",
]);

function modulePath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  return group === ""
    ? `kubernetes-models/${version}/${kind}`
    : `kubernetes-models/${group}/${version}/${kind}`;
}

let failures = 0, checked = 0;
for (const file of process.argv.slice(2)) {
  const text = readFileSync(file === "-" ? 0 : file, "utf8");
  const docs = parseAllDocuments(text);
  for (const [i, doc] of docs.entries()) {
    const where = `${file}#${i}`;
    if (doc.errors.length) {
      console.error(`${where}: YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
      failures++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue;  // empty document
    checked++;
    const { apiVersion, kind } = obj;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      console.error(`${where}: missing apiVersion or kind`);
      failures++;
      continue;
    }
    const name = obj.metadata?.name;
    if (typeof name !== "string" || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(name)) {
      console.error(`${where}: ${kind}: metadata.name '${name}' is not a DNS-1123 name`);
      failures++;
    }
    if (KNOWN_CRDS.has(`${apiVersion}/${kind}`)) {
      if (typeof obj.spec !== "object" || obj.spec === null) {
        console.error(`${where}: ${kind}: spec must be an object`);
        failures++;
      } else {
        console.log(`${where}: ${kind}/${name}: custom resource, shape only (no schema)`);
      }
      continue;
    }
    let Model;
    try {
      Model = (await import(modulePath(apiVersion, kind)))[kind];
    } catch (e) {
      console.error(`${where}: unknown apiVersion/kind ${apiVersion} ${kind}`);
      failures++;
      continue;
    }
    try {
      new Model(obj).validate();
      console.log(`${where}: ${kind}/${name}: valid ${apiVersion}`);
    } catch (e) {
      console.error(`${where}: ${kind}/${name}: ${e.message}`);
      failures++;
    }
  }
}
if (checked === 0) {
  console.error("validate-k8s: no documents checked");
  process.exit(1);
}
console.log(`validate-k8s: ${checked} documents, ${failures} invalid`);
process.exit(failures ? 1 : 0);
