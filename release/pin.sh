#!/usr/bin/env bash
# Points deploy/kustomization.yaml and deploy/cleanup/'s at an image pinned by digest, as
# release/image.sh --push prints it:
#
#   release/pin.sh REGISTRY/REPOSITORY@sha256:HEX
#
# `kubectl apply -k deploy/` then runs exactly that image (every architecture
# of its index); an operator mirroring it to their own registry pins their copy
# the same way (the digest stays the same when the index is copied whole, e.g.
# `skopeo copy --all`).
set -euo pipefail
cd "$(dirname "$0")/.."
reference=${1:?usage: $0 REGISTRY/REPOSITORY@sha256:HEX}
repository=${reference%@*}
digest=${reference#*@}
if [ "$repository" = "$reference" ] || ! [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "$reference is not pinned by a sha256 digest (REPOSITORY@sha256:HEX)" >&2
    exit 2
fi
python3 - "$repository" "$digest" deploy/kustomization.yaml deploy/cleanup/kustomization.yaml <<'PY'
import re, sys
repository, digest, *paths = sys.argv[1:]
entry = f"images:\n  - name: vigil\n    newName: {repository}\n    digest: {digest}\n"
for path in paths:
    text = open(path).read()
    pinned, n = re.subn(r"images:\n  - name: vigil\n(    \w+: .*\n)+", entry, text)
    if n != 1:
        sys.exit(f"{path}: no images entry for vigil to pin")
    open(path, "w").write(pinned)
PY
echo "deploy/ and deploy/cleanup/ run $repository@$digest"
