//! `vigil policy push`, run as the real binary against a real registry
//! (Debian's CNCF distribution) on loopback; what it published is read back
//! with an OCI client.

use oci_client::Reference;
use oci_client::manifest::OciManifest;
use vigil::base::digest::Digest;
use vigil::distribution::Access;
use vigil::distribution::{WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE};
use vigil_testbed::OciRegistry;

fn vigil(args: &[&str]) -> (bool, String, String) {
    let ran = vigil_testbed::cli::output(crate::vigil().args(args));
    (ran.ok, ran.stdout, ran.stderr)
}

/// The built-in sorter, written to a file as an author's build would.
fn sorter_file(dir: &std::path::Path) -> (String, Vec<u8>) {
    let bytes = vigil::policy::builtin("default-sorter").unwrap().to_vec();
    let path = dir.join("my-sorter.wasm");
    std::fs::write(&path, &bytes).unwrap();
    (path.display().to_string(), bytes)
}

#[tokio::test]
async fn push_publishes_the_cncf_wasm_layout_and_prints_the_pinned_reference() {
    let registry = OciRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let (file, bytes) = sorter_file(dir.path());
    let target = format!("{}/policies/my-sorter:v1", registry.addr());
    let cache = dir.path().join("cache").display().to_string();
    let (ok, stdout, stderr) = vigil(&[
        "policy",
        "push",
        &file,
        &target,
        "--insecure",
        "--cache-dir",
        &cache,
    ]);
    assert!(ok, "{stdout}{stderr}\n{}", registry.logs());
    let pinned = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pin:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no pin line: {stdout}"));
    let prefix = format!("{}/policies/my-sorter@sha256:", registry.addr());
    assert!(pinned.starts_with(&prefix), "{pinned}");

    // Read back by digest, as a node would.
    let reference: Reference = pinned.parse().unwrap();
    let access = Access {
        insecure: true,
        ..Access::default()
    };
    let (client, auth) = access.client(&reference);
    let (manifest, digest) = client.pull_manifest(&reference, &auth).await.unwrap();
    assert_eq!(Some(digest.as_str()), reference.digest());
    let OciManifest::Image(manifest) = manifest else {
        panic!("not an image manifest: {manifest:?}");
    };
    assert_eq!(manifest.config.media_type, WASM_CONFIG_MEDIA_TYPE);
    assert_eq!(
        manifest.artifact_type.as_deref(),
        Some(WASM_CONFIG_MEDIA_TYPE)
    );
    let [layer] = manifest.layers.as_slice() else {
        panic!("not one layer: {:?}", manifest.layers);
    };
    assert_eq!(layer.media_type, WASM_LAYER_MEDIA_TYPE);
    assert_eq!(layer.digest, format!("sha256:{}", Digest::of(&bytes).hex()));
    assert_eq!(layer.size, i64::try_from(bytes.len()).unwrap());
    let title = layer.annotations.as_ref().unwrap()["org.opencontainers.image.title"].as_str();
    assert_eq!(title, "my-sorter.wasm");
    let mut pulled = Vec::new();
    client
        .pull_blob(&reference, layer, &mut pulled)
        .await
        .unwrap();
    assert_eq!(pulled, bytes);
    let mut config = Vec::new();
    client
        .pull_blob(&reference, &manifest.config, &mut config)
        .await
        .unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], layer.digest.as_str());
    let exports = config["component"]["exports"].as_array().unwrap();
    assert!(
        exports
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("vigil:policy/sorter@")),
        "{config}"
    );

    // The tag names the same artifact.
    let tagged: Reference = target.parse().unwrap();
    let (_, by_tag) = client.pull_manifest(&tagged, &auth).await.unwrap();
    assert_eq!(Some(by_tag.as_str()), reference.digest());
}

#[test]
fn push_refuses_a_file_that_would_not_serve_before_any_request() {
    let registry = OciRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.wasm");
    std::fs::write(&file, b"not a component").unwrap();
    let target = format!("{}/policies/broken:v1", registry.addr());
    let (ok, stdout, stderr) = vigil(&[
        "policy",
        "push",
        &file.display().to_string(),
        &target,
        "--insecure",
        "--no-cache",
    ]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("is not a policy vigil would serve; nothing was pushed")
            && stderr.contains("not a WebAssembly file"),
        "{stderr}"
    );
    assert!(
        !registry.logs().contains("/v2/policies/broken"),
        "the registry was contacted:\n{}",
        registry.logs()
    );
}

#[test]
fn push_speaks_plain_http_only_when_asked() {
    let registry = OciRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = sorter_file(dir.path());
    let target = format!("{}/policies/my-sorter:v1", registry.addr());
    let (ok, stdout, stderr) = vigil(&["policy", "push", &file, &target, "--no-cache"]);
    assert!(!ok, "pushed over plain HTTP without --insecure: {stdout}");
    assert!(
        stderr.contains(&format!("cannot push {file} to {target}")),
        "{stderr}"
    );
    assert!(
        !registry.logs().contains("/v2/policies/my-sorter/manifests"),
        "a manifest reached the registry:\n{}",
        registry.logs()
    );
}

/// Pushes the built-in sorter to `registry` as `policies/my-sorter:TAG`;
/// answers the reference that pins it.
fn pushed_sorter(registry: &OciRegistry, dir: &std::path::Path, tag: &str) -> String {
    let (file, _) = sorter_file(dir);
    let target = format!("{}/policies/my-sorter:{tag}", registry.addr());
    let (ok, stdout, stderr) =
        vigil(&["policy", "push", &file, &target, "--insecure", "--no-cache"]);
    assert!(ok, "{stdout}{stderr}");
    vigil_testbed::cli::printed(&stdout, "pin:")
}

#[test]
fn verify_accepts_only_an_artifact_signed_under_the_key() {
    let registry = OciRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = vigil_testbed::cli::key_pair(dir.path(), "release");
    let (_, other) = vigil_testbed::cli::key_pair(dir.path(), "other");
    let pinned = pushed_sorter(&registry, dir.path(), "v1");
    let verify = |key: &std::path::Path| {
        vigil(&[
            "policy",
            "verify",
            &pinned,
            "--key",
            key.to_str().unwrap(),
            "--insecure",
        ])
    };
    let (ok, _, stderr) = verify(&public);
    assert!(
        !ok && stderr.contains("is not verified"),
        "unsigned: {stderr}"
    );
    let (ok, stdout, stderr) = vigil(&[
        "policy",
        "sign",
        &pinned,
        "--key",
        key.to_str().unwrap(),
        "--insecure",
    ]);
    assert!(ok, "{stdout}{stderr}");
    let (ok, stdout, stderr) = verify(&public);
    assert!(ok && stdout.starts_with("verified"), "{stdout}{stderr}");
    let (ok, _, stderr) = verify(&other);
    assert!(
        !ok && stderr.contains("is not verified"),
        "another key: {stderr}"
    );
}

#[tokio::test]
async fn attach_publishes_a_referrer_listed_once_under_the_tag_schema() {
    let registry = OciRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let pinned = pushed_sorter(&registry, dir.path(), "v1");
    let sbom = dir.path().join("sorter.cdx.json");
    std::fs::write(&sbom, br#"{"bomFormat": "CycloneDX", "components": []}"#).unwrap();
    let sbom = sbom.to_str().unwrap();
    let attach = |to: &str| vigil(&["policy", "attach", to, sbom, "--insecure"]);
    let (ok, stdout, stderr) = attach(&pinned);
    assert!(ok, "{stdout}{stderr}");
    let referrer = stdout.trim().rsplit(' ').next().unwrap().to_owned();
    // The same file again: the same artifact, listed once.
    let (ok, again, stderr) = attach(&pinned);
    assert!(ok && again.trim().ends_with(&referrer), "{again}{stderr}");

    // Read back as a client of the referrers API does: Debian's registry
    // has none, so oci-client falls back to the tag schema.
    let reference: Reference = pinned.parse().unwrap();
    let access = Access {
        insecure: true,
        ..Access::default()
    };
    let (client, auth) = access.client(&reference);
    let cyclonedx = "application/vnd.cyclonedx+json";
    let listed = client
        .pull_referrers(&reference, Some(cyclonedx))
        .await
        .unwrap();
    let digests: Vec<&str> = listed.manifests.iter().map(|m| m.digest.as_str()).collect();
    let referrer: Reference = referrer.parse().unwrap();
    assert_eq!(digests, [referrer.digest().unwrap()]);
    let (manifest, _) = client.pull_manifest(&referrer, &auth).await.unwrap();
    let OciManifest::Image(manifest) = manifest else {
        panic!("not an image manifest: {manifest:?}");
    };
    assert_eq!(manifest.artifact_type.as_deref(), Some(cyclonedx));
    let subject = manifest.subject.expect("a subject");
    assert_eq!(Some(subject.digest.as_str()), reference.digest());
    let mut pulled = Vec::new();
    (client.pull_blob(&referrer, &manifest.layers[0], &mut pulled))
        .await
        .unwrap();
    assert_eq!(pulled, std::fs::read(sbom).unwrap());

    // Nothing is attached to what the registry does not hold.
    let missing = format!(
        "{}/policies/my-sorter@sha256:{}",
        registry.addr(),
        "0".repeat(64)
    );
    let (ok, _, stderr) = attach(&missing);
    assert!(!ok && stderr.contains("cannot attach"), "{stderr}");
}
