//! vigil's image for the node: the release test's build (`release/
//! test-release.py --prepare-amd64`: `release/image.sh` on a clean clone of
//! this commit, the architecture the suite runs), pushed to the node's
//! registry as it is, and a second image made from it for the rolling update
//! (one label more: the same binary under another digest). No build may run
//! beside the suite: its episodes read the machine's own `memory.available`,
//! and a build (rustc takes gigabytes) would cross their thresholds too. CI
//! prepares the images in the background, amd64 first; the suite holds the
//! release test's lock `node` while it runs, and that preparation builds
//! arm64 only once the lock is free.

use super::root;
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use vigil_testbed::upstream::Upstream;

/// The image's references in the node's registry, by digest.
pub struct Images {
    /// The release's image index.
    pub first: String,
    /// The amd64 image with one label more.
    pub second: String,
}

/// Holds the release test's lock `node` until dropped: a preparation of the
/// release's images in the background builds nothing while it is held
/// (`release/test-release.py`).
pub fn machine_to_itself() -> File {
    let state = root().join("target/release-test");
    std::fs::create_dir_all(&state).expect("target/release-test");
    let lock = File::create(state.join("node.lock")).expect("the lock's file");
    lock.lock().expect("the lock");
    lock
}

/// The OCI layout holding the image index `vigil:VERSION`: the release
/// test's, its amd64 image (built if it is not yet), or the one
/// `VIGIL_NODE_IMAGE` names (by hand: an image built before, to skip the
/// build).
pub fn layout() -> PathBuf {
    let layout = match std::env::var_os("VIGIL_NODE_IMAGE") {
        Some(layout) => PathBuf::from(layout),
        None => {
            run(Command::new(root().join("release/test-release.py")).arg("--prepare-amd64"));
            let version = env!("CARGO_PKG_VERSION");
            root().join(format!(
                "target/release-test/checkout/target/image/vigil-{version}.oci"
            ))
        }
    };
    // Without `..` in it: buildah names an image it reads from a layout
    // after the layout's path, and `..` is no part of a name.
    std::fs::canonicalize(&layout)
        .unwrap_or_else(|error| panic!("the image's layout {}: {error}", layout.display()))
}

/// Pushes the index in `layout` and a second image to the node's registry.
pub fn push(cluster: &Upstream, layout: &Path) -> Images {
    let registry = cluster.registry();
    let version = env!("CARGO_PKG_VERSION");
    let source = format!("oci:{}:{version}", layout.display());
    let first = format!("docker://{registry}/vigil:{version}");
    run(Command::new("skopeo")
        .args(["copy", "--quiet", "--all", "--dest-tls-verify=false"])
        .args([&source, &first]));

    // The second: the image for this machine, with a label of its own.
    let storage = root().join("target/vigil-node/storage");
    let buildah = || {
        let mut command = Command::new("buildah");
        command
            .args(["--storage-driver", "vfs", "--root"])
            .arg(storage.join("root"))
            .arg("--runroot")
            .arg(storage.join("run"));
        command
    };
    let container = run(buildah().args(["from", "--quiet", "--pull-always", &source]));
    let container = container.trim();
    run(buildah().args([
        "config",
        "--label",
        "dev.vigil.test.image=second",
        container,
    ]));
    let second = format!("docker://{registry}/vigil:second");
    run(buildah().args([
        "commit",
        "--quiet",
        "--rm",
        "--tls-verify=false",
        container,
        &second,
    ]));
    Images {
        first: by_digest(registry, &first),
        second: by_digest(registry, &second),
    }
}

/// The image's own `vigil` binary (amd64), taken out of `layout`'s layers
/// into `target/vigil-node/image`: what the nodes run, so what precompiles
/// for them.
pub fn binary(layout: &Path) -> PathBuf {
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        layout.join("blobs/sha256").join(hex)
    };
    let json = |path: PathBuf| -> Value {
        serde_json::from_slice(&std::fs::read(&path).expect("the layout's file")).expect("JSON")
    };
    let version = env!("CARGO_PKG_VERSION");
    let top = json(layout.join("index.json"));
    let index = top["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == version)
        .expect("the version's index");
    let index = json(blob(index["digest"].as_str().expect("a digest")));
    let manifest = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|m| m["platform"]["architecture"] == "amd64")
        .expect("the amd64 image");
    let manifest = json(blob(manifest["digest"].as_str().expect("a digest")));
    let out = root().join("target/vigil-node/image");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("its folder");
    for layer in manifest["layers"].as_array().expect("layers") {
        let layer = blob(layer["digest"].as_str().expect("a digest"));
        run(Command::new("tar")
            .arg("-xf")
            .arg(layer)
            .arg("-C")
            .arg(&out));
    }
    out.join("vigil")
}

/// `REGISTRY/vigil@sha256:…` for the tag `reference` names.
fn by_digest(registry: &str, reference: &str) -> String {
    let inspect =
        run(Command::new("skopeo").args(["inspect", "--raw", "--tls-verify=false", reference]));
    let digest = vigil::base::digest::Digest::of(inspect.as_bytes()).hex();
    format!("{registry}/vigil@sha256:{digest}")
}

pub use vigil_testbed::cli::ok as run;
