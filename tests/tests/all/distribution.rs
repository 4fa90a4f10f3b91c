//! Policies pulled from a real OCI registry (Debian's CNCF distribution on
//! loopback): published with `vigil policy push`'s own code or, for the
//! artifacts it would never write, by hand; signed as `cosign sign --key`
//! stores a signature; pulled into a node's store.

use base64::Engine as _;
use oci_client::Reference;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;
use std::collections::HashSet;
use vigil::authoring::check_bytes;
use vigil::authoring::push;
use vigil::base::digest::Digest;
use vigil::distribution::Access;
use vigil::distribution::BlobStore;
use vigil::distribution::signature::{
    self, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, VerificationKey, signature_tag,
};
use vigil::distribution::{
    Expect, LEGACY_WASM_LAYER_MEDIA_TYPE, Pinned, PullError, Pulled, pull, verified_components,
};
use vigil::distribution::{
    MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, oci_digest,
};
use vigil::policy::{Host, Origin};
use vigil_testbed::OciRegistry;
use vigil_tests::REVERSE_SORTER;

const CAP: u64 = 64 << 20;

fn plain_http() -> Access {
    Access {
        insecure: true,
        ..Access::default()
    }
}

/// Publishes the reverse sorter to `repo` as `vigil policy push` does;
/// answers its pinned reference.
async fn publish_sorter(registry: &OciRegistry, repo: &str) -> String {
    let host = Host::new(None).unwrap();
    let report = check_bytes(
        &host,
        "reverse.wasm".into(),
        "reverse",
        REVERSE_SORTER,
        Origin::File("reverse.wasm".into()),
        "{}",
    )
    .unwrap();
    let target = format!("{}/{repo}:v1", registry.addr());
    push(
        REVERSE_SORTER.to_vec(),
        &report,
        "reverse.wasm",
        &target,
        &plain_http(),
    )
    .await
    .unwrap()
    .pinned
}

/// Pushes to `reference` an image manifest with an empty config of
/// `config_type` and `layers` (media type, bytes, annotations or null);
/// answers the manifest's digest.
async fn push_manifest(
    reference: &Reference,
    config_type: &str,
    layers: &[(&str, &[u8], serde_json::Value)],
) -> String {
    let (client, auth) = plain_http().client(reference);
    client
        .auth(reference, &auth, oci_client::RegistryOperation::Push)
        .await
        .unwrap();
    let config = b"{}".to_vec();
    let config_digest = oci_digest(&Digest::of(&config));
    client
        .push_blob(reference, config.clone(), &config_digest)
        .await
        .unwrap();
    let mut descriptors = Vec::new();
    for (media_type, bytes, annotations) in layers {
        let digest = oci_digest(&Digest::of(bytes));
        client
            .push_blob(reference, bytes.to_vec(), &digest)
            .await
            .unwrap();
        let mut descriptor =
            json!({"mediaType": media_type, "digest": digest, "size": bytes.len()});
        if !annotations.is_null() {
            descriptor["annotations"] = annotations.clone();
        }
        descriptors.push(descriptor);
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": config_type, "digest": config_digest, "size": config.len()},
        "layers": descriptors,
    }))
    .unwrap();
    let digest = oci_digest(&Digest::of(&manifest));
    client
        .push_manifest_raw(
            reference,
            manifest,
            http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
        )
        .await
        .unwrap();
    digest
}

/// Publishes an artifact `vigil policy push` would never write: a config of
/// `config_type` and `layers` (media type, bytes); answers its pinned
/// reference.
async fn publish_raw(
    registry: &OciRegistry,
    repo: &str,
    config_type: &str,
    layers: &[(&str, &[u8])],
) -> String {
    let reference: Reference = format!("{}/{repo}:raw", registry.addr()).parse().unwrap();
    let layers: Vec<_> = layers
        .iter()
        .map(|&(media_type, bytes)| (media_type, bytes, serde_json::Value::Null))
        .collect();
    let digest = push_manifest(&reference, config_type, &layers).await;
    format!("{}/{repo}@{digest}", registry.addr())
}

async fn pull_signed(
    store: &BlobStore,
    pinned: &str,
    key: &VerificationKey,
) -> Result<Pulled, PullError> {
    pull(
        &Pinned::parse(pinned).unwrap(),
        &plain_http(),
        store,
        CAP,
        Some(key),
        Expect::Component,
    )
    .await
}

async fn pull_into(store: &BlobStore, pinned: &str, cap: u64) -> Result<Pulled, PullError> {
    pull(
        &Pinned::parse(pinned).unwrap(),
        &plain_http(),
        store,
        cap,
        None,
        Expect::Component,
    )
    .await
}

/// The names in the store's blob directory (temporary files included).
fn stored(state: &std::path::Path) -> Vec<String> {
    let mut names: Vec<_> = std::fs::read_dir(state.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_pinned_policy_is_pulled_once_then_served_from_the_store_with_the_registry_gone() {
    let mut registry = OciRegistry::start();
    let pinned = publish_sorter(&registry, "vigil/reverse").await;
    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();

    let first = pull_into(&store, &pinned, CAP).await.unwrap();
    assert!(first.fetched);
    assert_eq!(first.layer, Digest::of(REVERSE_SORTER));
    assert_eq!(std::fs::read(&first.path).unwrap(), REVERSE_SORTER);
    assert_eq!(first.size, REVERSE_SORTER.len() as u64);

    // The registry goes away and the node restarts: a new store on the same
    // directory answers without a request.
    registry.stop();
    let store = BlobStore::open(state.path()).unwrap();
    let again = pull_into(&store, &pinned, CAP).await.unwrap();
    assert!(!again.fetched);
    assert_eq!((again.layer, &again.path), (first.layer, &first.path));

    // What it does not hold, it cannot get.
    let other = with_another_digest(&pinned);
    let error = pull_into(&store, &other, CAP).await.unwrap_err();
    assert_eq!(error.reason().as_str(), "unavailable", "{error}");
}

/// `pinned` with another manifest digest.
fn with_another_digest(pinned: &str) -> String {
    let (repo, _) = pinned.split_once('@').unwrap();
    format!("{repo}@{}", oci_digest(&Digest::of(b"nothing")))
}

#[tokio::test]
async fn a_manifest_the_registry_lacks_is_not_found() {
    let registry = OciRegistry::start();
    let pinned = publish_sorter(&registry, "vigil/reverse").await;
    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();
    let error = pull_into(&store, &with_another_digest(&pinned), CAP)
        .await
        .unwrap_err();
    assert_eq!(error.reason().as_str(), "not-found", "{error}");
}

#[tokio::test]
async fn a_tampered_blob_is_refused_and_leaves_nothing_in_the_store() {
    let registry = OciRegistry::start();
    let pinned = publish_sorter(&registry, "vigil/reverse").await;
    // The registry's copy changes under the same digest and size.
    let layer = oci_digest(&Digest::of(REVERSE_SORTER));
    let mut bytes = REVERSE_SORTER.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(registry.blob_path(&layer), &bytes).unwrap();

    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();
    let error = pull_into(&store, &pinned, CAP).await.unwrap_err();
    assert_eq!(error.reason().as_str(), "tampered", "{error}");
    assert!(!store.contains(&Digest::of(REVERSE_SORTER)));
    assert!(!store.contains(&Digest::of(&bytes)));
    assert_eq!(stored(state.path()), Vec::<String>::new());
}

#[tokio::test]
async fn the_size_cap_refuses_before_a_byte_of_the_layer_is_read() {
    let registry = OciRegistry::start();
    let pinned = publish_sorter(&registry, "vigil/reverse").await;
    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();
    let size = REVERSE_SORTER.len() as u64;
    let error = pull_into(&store, &pinned, size - 1).await.unwrap_err();
    assert!(
        matches!(&error, PullError::Oversized { what, cap }
            if what == &format!("the layer declares {size} bytes") && *cap == size - 1),
        "{error}"
    );
    let layer = format!("/blobs/{}", oci_digest(&Digest::of(REVERSE_SORTER)));
    assert_eq!(stored(state.path()), Vec::<String>::new());
    // At the cap exactly, it is taken: the one request for the layer the
    // registry logs is this one.
    assert!(pull_into(&store, &pinned, size).await.is_ok());
    assert_eq!(
        registry.requests("GET", &layer, 1),
        1,
        "{}",
        registry.logs()
    );
}

#[tokio::test]
async fn only_an_artifact_of_one_component_layer_in_a_known_layout_is_taken() {
    let registry = OciRegistry::start();
    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();
    let refused = [
        (
            "two layers",
            publish_raw(
                &registry,
                "vigil/two",
                WASM_CONFIG_MEDIA_TYPE,
                &[
                    (WASM_LAYER_MEDIA_TYPE, REVERSE_SORTER),
                    (WASM_LAYER_MEDIA_TYPE, b"more"),
                ],
            )
            .await,
        ),
        (
            "a container image's layer",
            publish_raw(
                &registry,
                "vigil/image",
                "application/vnd.oci.image.config.v1+json",
                &[(
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                    REVERSE_SORTER,
                )],
            )
            .await,
        ),
        (
            "a wasm layer with a container config",
            publish_raw(
                &registry,
                "vigil/mixed",
                "application/vnd.oci.image.config.v1+json",
                &[(WASM_LAYER_MEDIA_TYPE, REVERSE_SORTER)],
            )
            .await,
        ),
    ];
    for (what, pinned) in refused {
        let error = pull_into(&store, &pinned, CAP).await.unwrap_err();
        assert_eq!(error.reason().as_str(), "layout", "{what}: {error}");
    }
    assert_eq!(stored(state.path()), Vec::<String>::new());

    let legacy = publish_raw(
        &registry,
        "vigil/legacy",
        "application/vnd.wasm.config.v1+json",
        &[(LEGACY_WASM_LAYER_MEDIA_TYPE, REVERSE_SORTER)],
    )
    .await;
    let pulled = pull_into(&store, &legacy, CAP).await.unwrap();
    assert_eq!(std::fs::read(&pulled.path).unwrap(), REVERSE_SORTER);
}

/// A P-256 key pair, as `cosign generate-key-pair` makes.
fn key_pair() -> EcdsaKeyPair {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap()
}

/// The public key of `pair`, read from PEM as the agent reads `cosign.pub`.
fn verification_key(pair: &EcdsaKeyPair) -> VerificationKey {
    VerificationKey::from_pem(&VerificationKey::pem_of_point(pair.public_key().as_ref())).unwrap()
}

/// Stores, as `cosign sign --key` does, a signature by `pair` of a payload
/// naming `covers` under the signature tag of the artifact `pinned`.
async fn sign(pinned: &str, pair: &EcdsaKeyPair, covers: &Digest) {
    let target = Pinned::parse(pinned).unwrap();
    let (repository, _) = pinned.split_once('@').unwrap();
    let tag = signature_tag(&target.manifest());
    let reference: Reference = format!("{repository}:{tag}").parse().unwrap();
    let payload = signature::payload(repository, covers);
    let signed = pair.sign(&SystemRandom::new(), &payload).unwrap();
    let annotations = json!({SIGNATURE_ANNOTATION:
        base64::engine::general_purpose::STANDARD.encode(signed.as_ref())});
    push_manifest(
        &reference,
        "application/vnd.oci.image.config.v1+json",
        &[(SIMPLE_SIGNING_MEDIA_TYPE, payload.as_slice(), annotations)],
    )
    .await;
}

#[tokio::test]
async fn with_a_key_only_an_artifact_signed_under_it_for_its_own_digest_is_taken() {
    let mut registry = OciRegistry::start();
    let pinned = publish_sorter(&registry, "vigil/signed").await;
    let manifest = Pinned::parse(&pinned).unwrap().manifest();
    let (signer, stranger) = (key_pair(), key_pair());
    let key = verification_key(&signer);
    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();
    let refusals = [
        (None, "no signature of"),
        (
            Some((&signer, Digest::of(b"another artifact"))),
            "covers sha256:",
        ),
        (
            Some((&stranger, manifest)),
            "verifies with the configured key",
        ),
    ];
    for (signature, says) in refusals {
        if let Some((pair, covers)) = signature {
            sign(&pinned, pair, &covers).await;
        }
        let error = pull_signed(&store, &pinned, &key).await.unwrap_err();
        assert_eq!(error.reason().as_str(), "signature", "{error}");
        assert!(error.to_string().contains(says), "{error}");
    }
    assert_eq!(stored(state.path()), Vec::<String>::new());

    sign(&pinned, &signer, &manifest).await;
    let pulled = pull_signed(&store, &pinned, &key).await.unwrap();
    assert!(pulled.fetched);
    // The refusals came before the component was read: the one request for
    // it is the accepted pull's.
    let layer = format!("/blobs/{}", oci_digest(&Digest::of(REVERSE_SORTER)));
    assert_eq!(registry.requests("GET", &layer, 1), 1);

    // Restarted without the registry, the kept signature is checked again.
    registry.stop();
    let store = BlobStore::open(state.path()).unwrap();
    let held = pull_signed(&store, &pinned, &key).await.unwrap();
    assert!(!held.fetched);
    assert_eq!(
        verified_components(&store, &key),
        HashSet::from([Digest::of(REVERSE_SORTER)])
    );
    assert!(verified_components(&store, &verification_key(&stranger)).is_empty());
}
