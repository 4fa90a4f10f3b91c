#!/usr/bin/env bash
# Publishes a release of vigil from a clean checkout of the commit to release:
#
#   release/release.sh VERSION REGISTRY/REPOSITORY --key FILE [--insecure]
#       [--charts REGISTRY/PATH] [--download-url URL]
#
# 1. Checks: CHANGELOG.md has VERSION's section (`## [VERSION] - DATE`),
#    VERSION is the workspace's, the tree is clean, the tag vVERSION does not exist.
# 2. Builds the amd64 and arm64 images (release/image.sh) and pushes their
#    index to REGISTRY/REPOSITORY:VERSION.
# 3. Signs the index with the key (an unencrypted PKCS#8 P-256 PEM, as vigil
#    signs policies: a cosign keyed signature under sha256-HEX.sig).
# 4. Attaches each image's CycloneDX SBOM to it as an OCI referrer (`vigil
#    policy attach`: the referrers API where the registry has it, and the
#    referrers tag schema, sha256-HEX, which every registry serves).
# 5. Pins deploy/ and deploy/cleanup/ to the index's digest (release/pin.sh),
#    writes the chart from them (deploy/check.sh --write-chart), packages it
#    and pushes it as an OCI chart to REGISTRY/PATH/vigil:VERSION (by default
#    the image repository's parent /charts), and signs it too.
# 6. Commits the pinned deploy/ and chart on top of the released commit and
#    tags that commit vVERSION (annotated); the branch does not move, so it
#    never names the image of a release it is not (`git checkout vVERSION`
#    gives the pinned manifests).
# 7. Writes target/dist/: the kubectl plugin's archives (kubectl-vigil for
#    linux/amd64 and linux/arm64), a krew manifest naming them under URL, the
#    chart package, the SBOMs and release.txt, what was published.
#
# The registry's credentials are buildah's and Helm's own (`buildah login`,
# `helm registry login`) and vigil's (`--username`, $VIGIL_REGISTRY_PASSWORD,
# passed through VIGIL_REGISTRY_ARGS). Tested by release/test-release.py.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: $0 VERSION REGISTRY/REPOSITORY --key FILE [--insecure] [--charts REGISTRY/PATH] [--download-url URL]"
die() { echo "release: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "$usage"
version=$1 repository=$2
shift 2
key='' insecure='' charts='' download=''
while [ $# -gt 0 ]; do
    case "$1" in
        --key) key=$2; shift 2 ;;
        --insecure) insecure=--insecure; shift ;;
        --charts) charts=$2; shift 2 ;;
        --download-url) download=$2; shift 2 ;;
        *) die "$usage" ;;
    esac
done
[ -n "$key" ] || die "--key FILE is required: a release is signed"
[ -r "$key" ] || die "cannot read the key $key"
case "$repository" in
    */*) ;;
    *) die "$repository is not REGISTRY/REPOSITORY" ;;
esac
case "${repository##*/}" in *[:@]*) die "$repository names a tag or digest: the release names it $version" ;; esac
charts=${charts:-${repository%/*}/charts}
download=${download:-https://github.com/vigil-dev/vigil/releases/download/v$version}

# 1. What is released.
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$version is not MAJOR.MINOR.PATCH"
grep -Eq "^## \[${version//./\\.}\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" CHANGELOG.md ||
    die "CHANGELOG.md has no section for $version (a heading '## [$version] - YYYY-MM-DD')"
workspace=$(release/version.sh)
[ "$workspace" = "$version" ] || die "the workspace's version is $workspace, not $version (Cargo.toml)"
[ -z "$(git status --porcelain)" ] || die "the tree is not clean: $(git status --porcelain | head -3 | tr '\n' ' ')"
! git rev-parse -q --verify "refs/tags/v$version" >/dev/null || die "the tag v$version exists"
released=$(git rev-parse HEAD)
out=target/dist
rm -rf "$out"
mkdir -p "$out"

# 2. The images, both architectures in one index.
pin=$(release/image.sh --arch all --push "$repository:$version" $insecure | sed -n 's/^pin: //p')
[ -n "$pin" ] || die "image.sh printed no pinned reference"
vigil=target/x86_64-unknown-linux-musl/release/vigil
# Flags, split on white space on purpose (none holds a space).
# shellcheck disable=SC2206
registry_args=($insecure ${VIGIL_REGISTRY_ARGS:-})

# 3. The signature of the index (it covers every architecture: a pull by
# the index's digest can only resolve to the images it lists).
"$vigil" policy sign "$pin" --key "$key" "${registry_args[@]}"

# 4. Each image's SBOM, as a referrer of that image.
layout=target/image/vigil-$version.oci
images=$(python3 - "$layout" <<'PY'
import json, pathlib, sys
layout = pathlib.Path(sys.argv[1])
top = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
index = json.loads((layout / "blobs" / "sha256" / top.split(":")[1]).read_text())
for m in index["manifests"]:
    print(m["platform"]["architecture"], m["digest"])
PY
)
while read -r arch image; do
    cp "target/image/vigil-$version-$arch.cdx.json" "$out/"
    "$vigil" policy attach "$repository@$image" "$out/vigil-$version-$arch.cdx.json" "${registry_args[@]}"
done <<<"$images"

# 5. deploy/ and the chart, pinned; the chart published and signed.
release/pin.sh "$pin"
bash deploy/check.sh --write-chart
release/tools/build.sh
helm=target/tools/helm
"$helm" package deploy/chart --destination "$out" >/dev/null
plain=
[ -n "$insecure" ] && plain=--plain-http
"$helm" push "$out/vigil-$version.tgz" "oci://$charts" $plain 2>&1 | tee "$out/chart-push.log"
chart_digest=$(sed -n 's/^Digest: //p' "$out/chart-push.log")
[ -n "$chart_digest" ] || die "helm push printed no digest"
"$vigil" policy sign "$charts/vigil@$chart_digest" --key "$key" "${registry_args[@]}"

# 6. The release commit and its tag; the branch stays where it is.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
index_file=$scratch/index
GIT_INDEX_FILE=$index_file git read-tree HEAD
GIT_INDEX_FILE=$index_file git add deploy
tree=$(GIT_INDEX_FILE=$index_file git write-tree)
message="vigil $version

Image: $pin (signed; SBOMs attached as referrers)
Chart: oci://$charts/vigil:$version ($chart_digest)
Built from $released; this commit pins deploy/ and the chart to the image."
commit=$(git commit-tree "$tree" -p "$released" -m "Release $version: deploy/ and the chart run $pin")
git tag -a "v$version" -m "$message" "$commit"
git checkout -q -- deploy

# 7. The kubectl plugin and its krew manifest.
epoch=$(git log -1 --format=%ct "$released")
krew_platforms=
for arch in amd64 arm64; do
    case "$arch" in amd64) triple=x86_64-unknown-linux-musl ;; arm64) triple=aarch64-unknown-linux-musl ;; esac
    stage=$(mktemp -d)
    install -m 0755 "target/$triple/release/vigil" "$stage/kubectl-vigil"
    install -m 0644 LICENSE "$stage/LICENSE"
    archive=vigil-$version-linux-$arch.tar.gz
    tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
        -C "$stage" -cf - kubectl-vigil LICENSE | gzip -n >"$out/$archive"
    rm -rf "$stage"
    sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
    krew_platforms+="  - selector:
      matchLabels: {os: linux, arch: $arch}
    uri: $download/$archive
    sha256: $sum
    bin: kubectl-vigil
    files:
      - {from: kubectl-vigil, to: .}
      - {from: LICENSE, to: .}
"
done
cat >"$out/vigil.krew.yaml" <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: vigil
spec:
  version: v$version
  homepage: https://github.com/vigil-dev/vigil
  shortDescription: Roll-outs, modes, builds and evictions of vigil, the node agent
  description: |
    kubectl vigil status POLICY (or --config) shows how far a policy or a config has
    rolled out across the nodes and each node's mode; kubectl vigil enforce --percent N
    takes a share of the fleet from observing to acting; kubectl vigil pause and resume
    stop and restart every agent's evictions; kubectl vigil version the agents' builds;
    kubectl vigil where NODE the vigil pod of a node; kubectl vigil explain
    NAMESPACE/NAME why a pod was evicted.
  platforms:
$krew_platforms
EOF

cat >"$out/release.txt" <<EOF
version: $version
commit: $released
tag: v$version ($(git rev-parse "v$version^{commit}"))
image: $pin
images:
$(while IFS= read -r line; do echo "  $line"; done <<<"$images")
chart: oci://$charts/vigil:$version@$chart_digest
krew: $out/vigil.krew.yaml
EOF
cat "$out/release.txt"
echo "released vigil $version; next: push the tag (git push origin v$version) and bump the workspace version"
