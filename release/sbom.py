#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM of what the vigil binary for TARGET is built from.

Reads `cargo metadata` (the lockfile's exact versions; --locked, --offline when
the registry index is cached) and lists every crate linked into the binary:
the `vigil` package's normal dependencies for TARGET, and the built-in
policies (node-pressure, default-sorter, default-merger) with their normal
dependencies for wasm32-wasip2, as the binary embeds them; the musl C
library the Rust toolchain links statically for TARGET (its version read from
the toolchain's own libc.a); and the CA bundle the image carries (Debian's
ca-certificates, its version from dpkg). Build scripts, proc macros and
dev-dependencies are not shipped and not listed. Nothing in it depends on
when it is made: its time is SOURCE_DATE_EPOCH (else the commit's) and its
serial number is derived from what it describes.

    release/sbom.py x86_64-unknown-linux-musl VERSION > vigil.cdx.json
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime

BUILTINS = ("node-pressure", "default-sorter", "default-merger")


def metadata(target):
    out = subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1",
         "--filter-platform", target],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def shipped(meta, roots):
    """Package ids reachable from `roots` through normal dependencies, proc
    macros (run by the compiler, never linked) and what only they use left out."""
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    macros = {
        p["id"] for p in meta["packages"]
        if any("proc-macro" in t["kind"] for t in p["targets"])
    }
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen or pid in macros:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return seen


def purl(pkg):
    return f"pkg:cargo/{pkg['name']}@{pkg['version']}"


def component(pkg, scope_note):
    entry = {
        "type": "library",
        "bom-ref": purl(pkg),
        "name": pkg["name"],
        "version": pkg["version"],
        "purl": purl(pkg),
        "properties": [{"name": "vigil:linked-for", "value": scope_note}],
    }
    if pkg.get("license"):
        entry["licenses"] = [{"expression": pkg["license"]}]
    if pkg.get("source", "") and pkg["source"].startswith("registry+"):
        entry["externalReferences"] = [{
            "type": "distribution",
            "url": f"https://crates.io/crates/{pkg['name']}/{pkg['version']}",
        }]
    return entry


def musl(target):
    """The musl the toolchain links for `target`, from its libc.a."""
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], check=True,
                             capture_output=True, text=True).stdout.strip()
    libc = pathlib.Path(sysroot, "lib/rustlib", target, "lib/self-contained/libc.a")
    found = re.findall(rb"\x00(1\.\d+\.\d+)\x00", libc.read_bytes())
    if len(set(found)) != 1:
        sys.exit(f"{libc}: cannot tell the musl version ({sorted(set(found))})")
    version = found[0].decode()
    return {
        "type": "library",
        "bom-ref": f"pkg:generic/musl@{version}",
        "name": "musl",
        "version": version,
        "purl": f"pkg:generic/musl@{version}",
        "licenses": [{"expression": "MIT"}],
        "properties": [{"name": "vigil:linked-for", "value": f"{target} (static, from the Rust toolchain)"}],
    }


def ca_bundle():
    """The CA certificates the image carries, as Debian packaged them."""
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "ca-certificates"],
                             check=True, capture_output=True, text=True).stdout.strip()
    purl = f"pkg:deb/debian/ca-certificates@{version}?arch=all"
    return {
        "type": "data",
        "bom-ref": purl,
        "name": "ca-certificates",
        "version": version,
        "purl": purl,
        "licenses": [{"expression": "MPL-2.0"}],
        "properties": [{"name": "vigil:path", "value": "/etc/ssl/certs/ca-certificates.crt"}],
    }


def build_time():
    """SOURCE_DATE_EPOCH, else the commit's time."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or subprocess.run(
        ["git", "log", "-1", "--format=%ct"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    target, version = sys.argv[1], sys.argv[2]
    host, guest = metadata(target), metadata("wasm32-wasip2")
    by_name = {p["name"]: p for p in host["packages"] if p["source"] is None}
    vigil = by_name["vigil"]
    components = {}
    for meta, roots, note in (
        (host, [vigil["id"]], target),
        (guest, [by_name[b]["id"] for b in BUILTINS], "wasm32-wasip2"),
    ):
        packages = {p["id"]: p for p in meta["packages"]}
        for pid in sorted(shipped(meta, roots)):
            pkg = packages[pid]
            if pkg["id"] == vigil["id"]:
                continue
            entry = components.setdefault(purl(pkg), component(pkg, note))
            notes = entry["properties"][0]
            if note not in notes["value"].split(","):
                notes["value"] += "," + note
    for extra in (musl(target), ca_bundle()):
        components[extra["bom-ref"]] = extra
    listed = ",".join(sorted(components))
    serial = uuid.uuid5(uuid.NAMESPACE_URL, f"vigil/{version}/{target}/{listed}")
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": build_time(),
            "component": {
                "type": "application",
                "bom-ref": f"pkg:cargo/vigil@{version}",
                "name": "vigil",
                "version": version,
                "purl": f"pkg:cargo/vigil@{version}",
                "licenses": [{"expression": vigil["license"]}],
            },
            "properties": [{"name": "vigil:target", "value": target}],
        },
        "components": sorted(components.values(), key=lambda c: c["bom-ref"]),
    }
    json.dump(bom, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
