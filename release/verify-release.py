#!/usr/bin/env python3
"""Verifies a published release of vigil from the registry alone, with
none of the code that published it: the distribution API over plain HTTP
(a registry on loopback), the cosign signature checked with Python's
cryptography, the SBOMs found through the OCI referrers tag schema.

    verify-release.py REGISTRY REPOSITORY VERSION PUBLIC_KEY CHARTS OUT

Checks that REPOSITORY:VERSION is an index of linux/amd64 and linux/arm64
images; that a signature under PUBLIC_KEY (PEM) covers the index's digest,
and one covers the chart CHARTS/vigil:VERSION; that each image has a
CycloneDX SBOM referring to it, naming the musl C library, the CA bundle
and the crates, equal to the one the release kept. Writes OUT/vigil-ARCH
(each image's binary, from its layer) and prints the index's digest.
"""

import base64
import hashlib
import io
import json
import pathlib
import sys
import tarfile
import urllib.error
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
CYCLONEDX = "application/vnd.cyclonedx+json"


def get(registry, path, accept=None):
    request = urllib.request.Request(f"http://{registry}/v2/{path}")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request) as response:
        return response.read()


def manifest(registry, repository, reference, accept):
    """The manifest's bytes, checked against its digest when pinned by one."""
    body = get(registry, f"{repository}/manifests/{reference}", accept)
    if reference.startswith("sha256:"):
        assert "sha256:" + hashlib.sha256(body).hexdigest() == reference, reference
    return body


def blob(registry, repository, digest):
    body = get(registry, f"{repository}/blobs/{digest}")
    assert "sha256:" + hashlib.sha256(body).hexdigest() == digest, digest
    return body


def verify_signature(registry, repository, digest, key):
    """A cosign signature under `key` covers `digest`."""
    tag = digest.replace(":", "-") + ".sig"
    signatures = json.loads(manifest(registry, repository, tag, MANIFEST))
    for layer in signatures["layers"]:
        if layer["mediaType"] != SIMPLE_SIGNING:
            continue
        payload = blob(registry, repository, layer["digest"])
        signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
        try:
            key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            continue
        critical = json.loads(payload)["critical"]
        if (critical["type"] == "cosign container image signature"
                and critical["image"]["docker-manifest-digest"] == digest):
            return
    sys.exit(f"no signature under the key covers {repository}@{digest}")


def sbom_of(registry, repository, digest):
    """The CycloneDX SBOM that refers to `digest`, by the referrers tag schema."""
    tag = digest.replace(":", "-")
    referrers = json.loads(manifest(registry, repository, tag, INDEX))
    found = [d for d in referrers["manifests"] if d.get("artifactType") == CYCLONEDX]
    assert len(found) == 1, referrers
    artifact = json.loads(manifest(registry, repository, found[0]["digest"], MANIFEST))
    assert artifact["subject"]["digest"] == digest, artifact["subject"]
    assert artifact["artifactType"] == CYCLONEDX, artifact
    (layer,) = artifact["layers"]
    return blob(registry, repository, layer["digest"])


def binary_of(registry, repository, image):
    """The file /vigil from the image's layers."""
    for layer in image["layers"]:
        data = blob(registry, repository, layer["digest"])
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.name.lstrip("./") == "vigil":
                    return tar.extractfile(member).read()
    sys.exit("no /vigil in the image")


def main():
    registry, repository, version, key, charts, out = sys.argv[1:7]
    out = pathlib.Path(out)
    key = serialization.load_pem_public_key(pathlib.Path(key).read_bytes())
    body = manifest(registry, repository, version, INDEX)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    index = json.loads(body)
    assert index["mediaType"] == INDEX, index
    platforms = sorted((m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"])
    assert platforms == [("linux", "amd64"), ("linux", "arm64")], platforms
    verify_signature(registry, repository, digest, key)
    for m in index["manifests"]:
        arch = m["platform"]["architecture"]
        image = json.loads(manifest(registry, repository, m["digest"], MANIFEST))
        sbom = sbom_of(registry, repository, m["digest"])
        kept = (out / f"vigil-{version}-{arch}.cdx.json").read_bytes()
        assert sbom == kept, f"the {arch} SBOM published is not the one the release kept"
        names = {c["name"] for c in json.loads(sbom)["components"]}
        for wanted in ("musl", "ca-certificates", "wasmtime", "kube-client"):
            assert wanted in names, (arch, wanted)
        (out / f"vigil-{arch}").write_bytes(binary_of(registry, repository, image))
    chart_repository = f"{charts.split('/', 1)[1]}/vigil" if "/" in charts else "vigil"
    chart = manifest(registry, chart_repository, version, MANIFEST)
    verify_signature(registry, chart_repository, "sha256:" + hashlib.sha256(chart).hexdigest(), key)
    print(digest)


if __name__ == "__main__":
    try:
        main()
    except urllib.error.HTTPError as error:
        sys.exit(f"the registry answered {error.code} to {error.url}")
