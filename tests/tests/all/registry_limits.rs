//! A registry that answers without end: a manifest streamed forever, a
//! manifest of 100 MiB, a signature whose payload never ends, and a
//! signature manifest of more signatures than the agent reads. A real
//! registry cannot be made to answer so, so these run against a small HTTP
//! server of their own, which counts every byte it hands to the connection.
//! Each pull ends with a clear refusal, having read at most about its cap,
//! and leaves nothing in the store.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::stream;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use vigil::base::digest::Digest;
use vigil::distribution::signature::{SIGNATURE_ANNOTATION, VerificationKey, signature_tag};
use vigil::distribution::{
    Access, BlobStore, Expect, MANIFEST_MEDIA_TYPE, Pinned, PullError, Pulled,
    WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, oci_digest, pull,
};

/// What the hostile registry sends where a manifest or blob is asked for.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// The artifact's manifest, then an endless stream where its
    /// signature manifest is asked for.
    EndlessManifest,
    /// The artifact's manifest declared as, and sent as, 100 MiB.
    HugeManifest,
    /// The artifact's manifest and a signature manifest of one small
    /// layer, whose blob streams without end.
    EndlessSignature,
    /// The artifact's manifest and a signature manifest of 33 layers.
    ManySignatures,
}

struct Hostile {
    answer: Answer,
    /// The artifact's manifest, as served when it is served.
    manifest: Vec<u8>,
    /// Bytes handed to connections so far.
    sent: AtomicU64,
}

const CHUNK: usize = 64 * 1024;
const HUNDRED_MIB: u64 = 100 << 20;

/// A body of `total` bytes (or without end), counted into `sent` as each
/// chunk is handed over.
fn counted(hostile: Arc<Hostile>, total: Option<u64>) -> Body {
    let chunks = stream::unfold(0u64, move |given| {
        let hostile = Arc::clone(&hostile);
        async move {
            let left = total.map_or(CHUNK as u64, |total| total.saturating_sub(given));
            if left == 0 {
                return None;
            }
            let n = left.min(CHUNK as u64);
            hostile.sent.fetch_add(n, Ordering::Relaxed);
            let chunk = Bytes::from(vec![b' '; n as usize]);
            Some((Ok::<_, std::io::Error>(chunk), given + n))
        }
    });
    Body::from_stream(chunks)
}

fn json_answer(bytes: Vec<u8>) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
    );
    (headers, bytes).into_response()
}

fn signature_manifest(layers: usize) -> Vec<u8> {
    let layer = json!({
        "mediaType": vigil::distribution::signature::SIMPLE_SIGNING_MEDIA_TYPE,
        "digest": oci_digest(&Digest::of(b"payload")),
        "size": 100,
        "annotations": {SIGNATURE_ANNOTATION: "c2lnbmF0dXJl"},
    });
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": oci_digest(&Digest::of(b"{}")), "size": 2},
        "layers": vec![layer; layers],
    }))
    .unwrap()
}

/// Answers a request for `path` (`/v2/REPOSITORY/manifests/TARGET` or
/// `/v2/REPOSITORY/blobs/DIGEST`; the repository holds slashes).
async fn answer(State(hostile): State<Arc<Hostile>>, uri: Uri) -> Response {
    let path = uri.path();
    if path == "/v2/" {
        return StatusCode::OK.into_response();
    }
    if path.contains("/blobs/") {
        return counted(hostile, None).into_response();
    }
    let signature = path.ends_with(".sig");
    match (hostile.answer, signature) {
        (Answer::HugeManifest, _) => {
            let mut response = counted(Arc::clone(&hostile), Some(HUNDRED_MIB)).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(HUNDRED_MIB));
            response
        }
        (_, false) => json_answer(hostile.manifest.clone()),
        (Answer::EndlessManifest, true) => counted(Arc::clone(&hostile), None).into_response(),
        (Answer::EndlessSignature, true) => json_answer(signature_manifest(1)),
        (Answer::ManySignatures, true) => json_answer(signature_manifest(33)),
    }
}

/// The hostile registry on a free loopback port; answers its address.
async fn serve(hostile: Arc<Hostile>) -> String {
    let app = Router::new().fallback(answer).with_state(hostile);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr.to_string()
}

/// A policy artifact's manifest (its layer is never reached).
fn artifact_manifest() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE,
                   "digest": oci_digest(&Digest::of(b"{}")), "size": 2},
        "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE,
                    "digest": oci_digest(&Digest::of(b"component")), "size": 9}],
    }))
    .unwrap()
}

/// Pulls the artifact from a registry answering as `answer` (with a
/// verification key, so signatures are read); answers the result, the
/// bytes the registry handed over, and what the store kept.
async fn pull_from(answer: Answer) -> (Result<Pulled, PullError>, u64, usize) {
    let manifest = artifact_manifest();
    let digest = Digest::of(&manifest);
    let hostile = Arc::new(Hostile {
        answer,
        manifest,
        sent: AtomicU64::new(0),
    });
    let addr = serve(Arc::clone(&hostile)).await;
    let pinned = Pinned::parse(&format!("{addr}/vigil/sorter@{}", oci_digest(&digest))).unwrap();
    assert!(signature_tag(&digest).ends_with(".sig"));
    let access = Access {
        insecure: true,
        ..Access::default()
    };
    let state = tempfile::tempdir().unwrap();
    let store = BlobStore::open(state.path()).unwrap();
    // Any key: no signature here verifies, and each case is refused before.
    let key = VerificationKey::from_pem(&VerificationKey::pem_of_point(&p256_point())).unwrap();
    let pulling = pull(
        &pinned,
        &access,
        &store,
        64 << 20,
        Some(&key),
        Expect::Component,
    );
    // A pull that read without a bound would never end: fail instead.
    let result = tokio::time::timeout(Duration::from_secs(120), pulling)
        .await
        .expect("the pull ends");
    let kept = std::fs::read_dir(state.path().join("blobs/sha256"))
        .map(|entries| entries.count())
        .unwrap_or(0);
    (result, hostile.sent.load(Ordering::Relaxed), kept)
}

/// A valid P-256 public point (the generator's).
fn p256_point() -> Vec<u8> {
    let hex = "046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296\
               4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5";
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Most a refused read may have cost: its cap, and what loopback's socket
/// buffers held when the agent stopped reading.
const READ_AT_MOST: u64 = 16 << 20;

#[tokio::test]
async fn a_manifest_of_100_mib_is_refused_on_its_declared_length() {
    let (result, sent, kept) = pull_from(Answer::HugeManifest).await;
    let error = result.unwrap_err();
    assert_eq!(error.reason().as_str(), "oversized", "{error}");
    assert!(
        error.to_string().contains("declares 104857600 bytes"),
        "{error}"
    );
    assert!(sent < READ_AT_MOST, "{sent} bytes sent");
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn a_signature_manifest_streamed_without_end_is_cut_at_its_cap() {
    let (result, sent, kept) = pull_from(Answer::EndlessManifest).await;
    let error = result.unwrap_err();
    assert_eq!(error.reason().as_str(), "oversized", "{error}");
    assert!(
        error.to_string().contains("sends more than 65536 bytes"),
        "{error}"
    );
    assert!(sent < READ_AT_MOST, "{sent} bytes sent");
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn a_signature_payload_streamed_without_end_is_no_signature() {
    let (result, sent, kept) = pull_from(Answer::EndlessSignature).await;
    let error = result.unwrap_err();
    // Read up to its cap and dropped: no signature covers the artifact.
    assert_eq!(error.reason().as_str(), "signature", "{error}");
    assert!(sent < READ_AT_MOST, "{sent} bytes sent");
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn more_signatures_than_the_agent_reads_are_refused_before_one_is_read() {
    let (result, sent, kept) = pull_from(Answer::ManySignatures).await;
    let error = result.unwrap_err();
    assert_eq!(error.reason().as_str(), "layout", "{error}");
    assert!(error.to_string().contains("33 signatures"), "{error}");
    assert_eq!(sent, 0, "no payload was asked for");
    assert_eq!(kept, 0);
}
