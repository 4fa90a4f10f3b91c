#!/usr/bin/env bash
# Points deploy/kustomization.yaml at an image pinned by digest, as
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
python3 - deploy/kustomization.yaml "$repository" "$digest" <<'PY'
import re, sys
path, repository, digest = sys.argv[1:]
text = open(path).read()
entry = f"images:\n  - name: vigil\n    newName: {repository}\n    digest: {digest}\n"
pinned, n = re.subn(r"images:\n  - name: vigil\n(    \w+: .*\n)+", entry, text)
if n != 1:
    sys.exit(f"{path}: no images entry for vigil to pin")
open(path, "w").write(pinned)
PY
echo "deploy/kustomization.yaml runs $repository@$digest"
