#!/usr/bin/env python3
"""Generates src/generated/builtin-schemas.json: the OpenAPI v3 component schemas of the
built-in kinds the hub serves, and every definition they reference, for Kubernetes v1.32.

Source: the Kubernetes v1.32 JSON schema shipped in the PyPI package kubernetes-validate
(pinned below, checked by sha256). Run from the repository root:

    python3 crates/apiserver/gen/schemas.py

It downloads the pinned wheel with pip into a temporary directory (or takes its path as the
first argument) and rewrites the output file. The output is deterministic: keys sorted,
no whitespace.

The source is JSON Schema 2020-12 with nullable types (`"type": ["string", "null"]`),
`$ref` into `#/$defs`, `oneOf` for int-or-string and quantities, and `enum` on apiVersion
and kind. OpenAPI v3 as the Kubernetes API server publishes it has plain types, `$ref` into
`#/components/schemas` (wrapped in `allOf` when a description sits beside it), and
`x-kubernetes-int-or-string` / `format: int-or-string`. The `x-kubernetes-*` annotations
(group-version-kind, patch strategies and merge keys, list types and map keys) are kept.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "kubernetes-validate==1.37.0"
WHEEL = "kubernetes_validate-1.37.0-py3-none-any.whl"
WHEEL_SHA256 = "85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9"
MEMBER = "kubernetes_validate/kubernetes-json-schema/v1.32.0-local/_definitions.json"
OUTPUT = os.path.join(os.path.dirname(__file__), "..", "src", "generated", "builtin-schemas.json")

# The kinds Registry::builtin() serves (a Rust test checks that the two agree).
KINDS = [
    ("", "v1", kind)
    for kind in [
        "ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
        "PersistentVolumeClaim", "Pod", "ResourceQuota", "Secret", "ServiceAccount", "Service",
    ]
] + [
    ("apps", "v1", "DaemonSet"), ("apps", "v1", "Deployment"), ("apps", "v1", "ReplicaSet"),
    ("apps", "v1", "StatefulSet"),
    ("batch", "v1", "CronJob"), ("batch", "v1", "Job"),
    ("networking.k8s.io", "v1", "Ingress"), ("networking.k8s.io", "v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "Role"),
    ("coordination.k8s.io", "v1", "Lease"),
    ("events.k8s.io", "v1", "Event"),
    ("policy", "v1", "PodDisruptionBudget"),
    ("autoscaling", "v2", "HorizontalPodAutoscaler"),
    ("discovery.k8s.io", "v1", "EndpointSlice"),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ("certificates.k8s.io", "v1", "CertificateSigningRequest"),
    ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
    ("authentication.k8s.io", "v1", "SelfSubjectReview"),
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"),
    ("authorization.k8s.io", "v1", "SubjectAccessReview"),
    ("authorization.k8s.io", "v1", "LocalSubjectAccessReview"),
]

# Definitions every group-version document needs besides the kinds.
EXTRA = [
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
]

# Kubernetes' own OpenAPI forms of the types the JSON schema spells with oneOf.
SPECIAL = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
}


def load(path):
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != WHEEL_SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected {WHEEL_SHA256}")
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read(MEMBER))["$defs"]


def ref_name(ref):
    prefix = "#/$defs/"
    if not ref.startswith(prefix):
        sys.exit(f"unexpected $ref {ref}")
    return ref[len(prefix):]


def convert(schema, refs):
    """The OpenAPI v3 form of one JSON schema node; collects referenced names in refs."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "$ref":
            continue
        if key == "type":
            types = [t for t in (value if isinstance(value, list) else [value]) if t != "null"]
            if len(types) != 1:
                sys.exit(f"unexpected type {value}")
            out["type"] = types[0]
        elif key == "oneOf":
            # Only int-or-string and quantities use oneOf; they come in by $ref (SPECIAL).
            sys.exit(f"unexpected inline oneOf {schema}")
        elif key in ("properties", "patternProperties"):
            out[key] = {k: convert(v, refs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = convert(value, refs)
        elif key in ("$schema", "$id"):
            continue
        else:
            out[key] = value
    if "$ref" in schema:
        name = ref_name(schema["$ref"])
        refs.add(name)
        target = {"$ref": "#/components/schemas/" + name}
        if out:
            out["allOf"] = [target]
        else:
            out = target
    return out


def main():
    if len(sys.argv) > 1:
        wheel = sys.argv[1]
        defs = load(wheel)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE],
                check=True,
            )
            defs = load(os.path.join(tmp, WHEEL))

    by_gvk = {}
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name

    todo = []
    for gvk in KINDS:
        if gvk not in by_gvk:
            sys.exit(f"no definition for {gvk}")
        todo.append(by_gvk[gvk])
    todo.extend(EXTRA)

    out = {}
    while todo:
        name = todo.pop()
        if name in out:
            continue
        if name not in defs:
            sys.exit(f"no definition {name}")
        if name in SPECIAL:
            converted = dict(SPECIAL[name])
            if "description" in defs[name]:
                converted["description"] = defs[name]["description"]
            out[name] = converted
            continue
        refs = set()
        converted = convert(defs[name], refs)
        if name in dict((by_gvk[g], g) for g in KINDS):
            # apiVersion and kind are not enums in Kubernetes' documents.
            for field in ("apiVersion", "kind"):
                converted.get("properties", {}).get(field, {}).pop("enum", None)
        out[name] = converted
        todo.extend(sorted(refs))

    with open(OUTPUT, "w") as f:
        json.dump(out, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    print(f"{OUTPUT}: {len(out)} schemas")


if __name__ == "__main__":
    main()
