#!/usr/bin/env python3
"""Generates src/generated/builtin-protobuf.json: how to read the Kubernetes protobuf
encoding of the built-in kinds the hub serves, as JSON.

kubectl's typed commands (`kubectl create namespace`, `create configmap`, `create
deployment`, ...) send their objects as `application/vnd.kubernetes.protobuf`. The hub
decodes them into the JSON a JSON client would have sent, driven by this table:

    {"kinds": {"<apiVersion> <kind>": "<definition>"},
     "messages": {"<definition>": {"<field number>": [json name, type, repeated, message]}}}

where type is string, bytes, bool, int32, int64, double, message, map (a map's entries
are messages with key 1 and value 2: "message" names the value's definition, or the
scalar type prefixed with "scalar:"), or inline (a Go struct embedded in its parent: its
fields are the parent's in JSON). Definition names are those of the Kubernetes OpenAPI
schema (`io.k8s.api.core.v1.ConfigMap`).

Sources, both pinned and checked by sha256:
- field numbers and wire types: the Rust crate k8s-pb 0.9.0 (prost code generated from
  Kubernetes' generated.proto files), fetched by cargo into its registry;
- JSON field names: the Kubernetes v1.32 schema in the PyPI package kubernetes-validate,
  the same input as gen/schemas.py.

Run from the repository root:

    python3 crates/apiserver/gen/protobuf.py [kubernetes_validate-1.37.0-py3-none-any.whl]

Every message must match a JSON schema definition, or the script fails naming it; fields
the v1.32 schema does not have (newer than it) are left out and listed.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import schemas  # noqa: E402  (the same pinned JSON schema and the same list of kinds)

CRATE = "k8s-pb"
CRATE_VERSION = "0.9.0"
CRATE_SHA256 = "43b6ba14400b62feaa58ebbbd32ce2d9a4601339b2820af393f68033b9cea620"
OUTPUT = os.path.join(os.path.dirname(__file__), "..", "src", "generated", "builtin-protobuf.json")

# Kinds kubectl sends to subresources, not served as resources of their own (so not in
# schemas.KINDS): `kubectl create token` POSTs a TokenRequest to serviceaccounts/NAME/token.
SUBRESOURCE_KINDS = [("authentication.k8s.io", "v1", "TokenRequest")]

FIELD = re.compile(r"#\[prost\(([^\]]*)\)\]\s*pub (?:r#)?(\w+):\s*([^\n]+),\n")
STRUCT = re.compile(r"pub struct (\w+) \{(\}|\n.*?\n\})", re.S)


def crate_source():
    """The unpacked k8s-pb crate, fetched by cargo into its registry."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "Cargo.toml"), "w") as f:
            f.write('[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n'
                    f'[dependencies]\n{CRATE} = "={CRATE_VERSION}"\n')
        os.mkdir(os.path.join(tmp, "src"))
        open(os.path.join(tmp, "src", "lib.rs"), "w").close()
        meta = json.loads(subprocess.run(
            ["cargo", "metadata", "--format-version", "1"], cwd=tmp, check=True,
            capture_output=True, text=True).stdout)
    package = next(p for p in meta["packages"] if p["name"] == CRATE)
    root = os.path.dirname(package["manifest_path"])
    archive = os.path.join(os.path.dirname(os.path.dirname(root)), "..", "cache",
                           os.path.basename(os.path.dirname(root)), f"{CRATE}-{CRATE_VERSION}.crate")
    with open(archive, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != CRATE_SHA256:
        sys.exit(f"{archive}: sha256 {digest}, expected {CRATE_SHA256}")
    return os.path.join(root, "src")


def definition_prefix(module):
    """`api/core/v1` -> `io.k8s.api.core.v1`; apiextensions' package has its own name."""
    parts = module.split("/")
    if parts[0] == "apiextensions_apiserver":
        parts[0] = "apiextensions-apiserver"
    return "io.k8s." + ".".join(parts)


def one_line_types(body):
    """Joins the lines rustfmt breaks inside a type's angle brackets (doc comments,
    whose text may hold brackets, are dropped first)."""
    body = re.sub(r"(?m)^\s*//.*\n", "", body)
    out, depth, i = [], 0, 0
    while i < len(body):
        c = body[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        if c == "\n" and depth > 0:
            while i + 1 < len(body) and body[i + 1] in " \t":
                i += 1
        else:
            out.append(c)
        i += 1
    return re.sub(r",>", ">", "".join(out))


def parse(src):
    """{(module, struct): [(tag, spec, field, rust type)]} for every prost struct."""
    structs = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if name != "mod.rs":
                continue
            module = os.path.relpath(dirpath, src)
            text = open(os.path.join(dirpath, name)).read()
            for struct, body in STRUCT.findall(text):
                body = one_line_types(body)
                fields = []
                for spec, field, rust in FIELD.findall(body + "\n"):
                    tag = int(re.search(r'tag = "(\d+)"', spec).group(1))
                    fields.append((tag, spec, field, rust))
                if len(fields) != body.count("#[prost("):
                    sys.exit(f"{module}::{struct}: read {len(fields)} of {body.count('#[prost(')} fields")
                structs[(module, struct)] = fields
    return structs


def resolve(module, rust):
    """The (module, struct) a field's Rust type names, or None for scalars."""
    inner = re.sub(r"^.*<", "", rust.replace(">", "")).split(",")[-1].strip()
    if inner.startswith("::prost") or inner in ("i32", "i64", "bool", "f64", "f32", "u8"):
        return None
    parts = inner.split("::")
    base = module.split("/")
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    return ("/".join(base + parts[:-1]), parts[-1])


def squash(name):
    """A name with case and separators gone: `volume_id`, `volumeID` -> `volumeid`;
    `x-kubernetes-list-type` and `x_kubernetes_list_type` agree, and so do `$schema`
    and `schema`."""
    return re.sub(r"[_\-$]", "", name).lower()


def main():
    wheel = sys.argv[1] if len(sys.argv) > 1 else None
    if wheel:
        defs = schemas.load(wheel)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                            schemas.PACKAGE], check=True)
            defs = schemas.load(os.path.join(tmp, schemas.WHEEL))
    structs = parse(crate_source())

    # Definition name of every prost struct, matched case-insensitively within its package.
    by_lower = {d.lower(): d for d in defs}

    def lookup(key):
        module, struct = key
        return by_lower.get((definition_prefix(module) + "." + struct).lower())

    def definition(key):
        name = lookup(key)
        if name is None:
            sys.exit(f"no JSON schema definition for {key[0]}::{key[1]}")
        return name

    kinds = {}
    todo = []
    for group, version, kind in schemas.KINDS + SUBRESOURCE_KINDS:
        api_version = f"{group}/{version}" if group else version
        key = next((k for k in structs if k[1] == kind and lookup(k) is not None
                    and {"group": group, "version": version, "kind": kind}
                    in defs[lookup(k)].get("x-kubernetes-group-version-kind", [])), None)
        if key is None:
            sys.exit(f"no protobuf message for {api_version} {kind}")
        kinds[f"{api_version} {kind}"] = definition(key)
        todo.append(key)
    todo.append(("apimachinery/pkg/apis/meta/v1", "DeleteOptions"))

    messages = {}
    skipped = []
    # Structs Go embeds inline that the schema has no definition of (ProbeHandler,
    # VolumeSource, ...): their JSON names are their parent's.
    inlined = {}
    while todo:
        key = todo.pop()
        if key in inlined:
            name, properties = inlined[key]
        else:
            name = definition(key)
            properties = defs[name].get("properties", {})
        if name in messages:
            continue
        by_squashed = {squash(p): p for p in properties}
        fields = {}
        for tag, spec, field, rust in structs[key]:
            json_name = by_squashed.get(squash(field))
            target = resolve(key[0], rust)
            if json_name is None and properties:
                embedded = lookup(target) if target and spec.startswith("message") else None
                own = {squash(f) for _, _, f, _ in structs.get(target, [])} if target else set()
                if embedded and set(defs[embedded].get("properties", {})) <= set(properties):
                    # A Go struct embedded inline: its fields sit in this object in JSON.
                    fields[str(tag)] = ["", "inline", 0, embedded]
                    todo.append(target)
                elif target and not embedded and own and own <= set(by_squashed):
                    synthetic = f"{definition_prefix(target[0])}.{target[1]}"
                    inlined[target] = (synthetic, properties)
                    fields[str(tag)] = ["", "inline", 0, synthetic]
                    todo.append(target)
                else:
                    # A field newer than the v1.32 schema: the hub would prune it anyway.
                    skipped.append(f"{name}.{field}")
                continue
            repeated = "repeated" in spec
            if spec.startswith("btree_map"):
                value = spec.split('"')[1].split(",")[1].strip()
                kind = "map"
                ref = lookup(target) if value == "message" else "scalar:" + value
                if value == "message":
                    if ref is None:
                        # A Go named list type (ExtraValue): only in server-written fields.
                        skipped.append(f"{name}.{field}")
                        continue
                    todo.append(target)
            else:
                kind = spec.split(",")[0].split("=")[0].strip()
                ref = None
                if kind == "message":
                    ref = definition(target)
                    todo.append(target)
            fields[str(tag)] = [json_name or field, kind, 1 if repeated else 0, ref]
        messages[name] = fields

    with open(OUTPUT, "w") as f:
        json.dump({"kinds": kinds, "messages": messages}, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    print(f"{OUTPUT}: {len(kinds)} kinds, {len(messages)} messages")
    print(f"fields newer than the v1.32 schema, left out: {', '.join(sorted(skipped)) or 'none'}")


if __name__ == "__main__":
    main()
