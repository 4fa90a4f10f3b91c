//! What a registry or an operator hands the agent about a policy: the
//! manifest of a version, its pinned reference, the cosign signatures
//! beside it, and the public keys it is checked with.

use crate::base::digest::Digest;
use crate::base::mutated::{mutated, mutated_text};
use crate::distribution::layout::{Artifact, Description};
use crate::distribution::pull::{Expect, Pinned, layer};
use crate::distribution::signature::{self, Signed, SigningKey, VerificationKey};
use base64::Engine;
use proptest::prelude::*;

/// A version's manifest as `vigil policy push` publishes it.
fn manifest() -> Vec<u8> {
    Artifact::of(&Description {
        digest: Digest::of(b"component"),
        size: 1 << 20,
        title: "sorter.wasm",
        exports: &["vigil:policy/candidate-sorter@0.3.0".to_owned()],
        imports: &[],
        created: "2026-11-29T00:00:00Z",
    })
    .manifest
}

const REFERENCE: &str = "registry.example.com:5000/vigil/sorter:1@sha256:\
    0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A key pair made for the test, its public half as cosign writes it.
fn keys() -> (SigningKey, String) {
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref());
    let private = format!("-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n");
    let public = VerificationKey::pem_of_point(pair.public_key().as_ref());
    (SigningKey::from_pem(&private).unwrap(), public)
}

proptest! {
    #![proptest_config(super::budget())]

    #[test]
    fn a_mutated_manifest_yields_its_layer_or_an_error(bytes in mutated(manifest())) {
        if let Ok((_, size)) = layer(&bytes, Expect::Component, 4 << 20) {
            prop_assert!(size <= 4 << 20);
        }
    }

    #[test]
    fn a_mutated_reference_is_pinned_or_refused(text in mutated_text(REFERENCE)) {
        if let Ok(pinned) = Pinned::parse(&text) {
            prop_assert!(text.contains(&pinned.manifest().hex()));
        }
    }

    #[test]
    fn a_mutated_public_key_parses_or_is_refused(text in mutated_text(keys().1)) {
        let _ = VerificationKey::from_pem(&text);
    }

    #[test]
    fn a_changed_payload_or_signature_never_verifies(
        payload in mutated(signature::payload("vigil/sorter", &Digest::of(b"m"))),
        flip in any::<usize>(),
    ) {
        let (signing, public) = keys();
        let key = VerificationKey::from_pem(&public).unwrap();
        let manifest = Digest::of(b"m");
        let (genuine, signed) = signing.sign("vigil/sorter", &manifest).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut changed = b64.decode(&signed).unwrap();
        let at = flip % changed.len();
        changed[at] ^= 1;
        // A changed payload under the genuine signature, and the genuine
        // payload under a changed signature: neither covers the manifest.
        let forged = [
            Signed { payload: b64.encode(&payload), signature: signed.clone() },
            Signed { payload: b64.encode(&genuine), signature: b64.encode(&changed) },
        ];
        let verified = signature::verify(&key, &manifest, &forged);
        prop_assert!(verified.is_err() || payload == genuine, "{verified:?}");
    }
}
