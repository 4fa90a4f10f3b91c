//! Cosign keyed signatures of policy artifacts, checked with `ring`.
//!
//! `cosign sign --key cosign.key --tlog-upload=false REF@sha256:HEX` stores
//! the signature in the artifact's repository under the tag
//! `sha256-HEX.sig`: an image manifest whose layers are "simple signing"
//! payloads (`application/vnd.dev.cosign.simplesigning.v1+json`, a JSON
//! that names the signed manifest's digest), each annotated with its
//! ECDSA P-256 signature (`dev.cosignproject.cosign/signature`, base64 of
//! the ASN.1 signature of the payload's SHA-256). An artifact is accepted
//! when one payload both verifies under the configured public key and
//! names the artifact's own manifest digest.
//!
//! [`SigningKey`] makes such signatures (`vigil policy sign`) with an
//! unencrypted PKCS#8 P-256 key, for pipelines without cosign; cosign's
//! own encrypted key files are cosign's to use.

use crate::base::digest::Digest;
use base64::Engine as _;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The media type of a simple-signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation carrying a payload's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// What cosign writes as a payload's `critical.type`.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";

/// The DER prefix of a P-256 public key in SubjectPublicKeyInfo form
/// (`id-ecPublicKey`, `prime256v1`, then a 66-byte bit string).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Why a key or a signature was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The verification key is not a PEM P-256 public key.
    #[error("the verification key is not a PEM ECDSA P-256 public key (cosign.pub): {0}")]
    Key(String),
    /// The node has no verification key, and the policy does not take
    /// unsigned versions.
    #[error(
        "unsigned versions are refused: this node has no verification key (--verification-key) \
         and the VigilPolicy does not say allowUnsigned: true"
    )]
    NoKey,
    /// No signature is stored for the digest.
    #[error("no signature of {0} (its sha256-….sig tag is missing)")]
    Missing(String),
    /// No payload verifies under the key.
    #[error("no signature of {0} verifies with the configured key")]
    WrongKey(String),
    /// A payload verifies but names another artifact.
    #[error("the signature verifies but covers {covered}, not {wanted}")]
    OtherDigest {
        /// The digest the payload names.
        covered: String,
        /// The artifact's digest.
        wanted: String,
    },
}

/// A public key signatures are checked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationKey {
    /// The uncompressed curve point.
    point: Vec<u8>,
}

impl VerificationKey {
    /// Reads a PEM `PUBLIC KEY` (as `cosign generate-key-pair` writes
    /// `cosign.pub`).
    ///
    /// # Errors
    /// It is not PEM, not a public key, or not on P-256.
    pub fn from_pem(pem: &str) -> Result<Self, SignatureError> {
        let der = pem_block(pem, "PUBLIC KEY")?;
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 4 => Ok(Self {
                point: point.to_vec(),
            }),
            _ => Err(SignatureError::Key(
                "not an uncompressed ECDSA P-256 key".into(),
            )),
        }
    }

    /// The PEM form of the key whose uncompressed point is `point`.
    pub fn pem_of_point(point: &[u8]) -> String {
        let der = [&P256_SPKI_PREFIX[..], point].concat();
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
    }

    /// Whether `signature` (ASN.1 DER) signs `payload` under this key.
    fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

/// The DER of the PEM block `label` in `pem`.
fn pem_block(pem: &str, label: &str) -> Result<Vec<u8>, SignatureError> {
    let body: String = pem
        .lines()
        .skip_while(|l| l.trim() != format!("-----BEGIN {label}-----"))
        .skip(1)
        .take_while(|l| l.trim() != format!("-----END {label}-----"))
        .map(str::trim)
        .collect();
    if body.is_empty() {
        return Err(SignatureError::Key(format!("no {label} block")));
    }
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| SignatureError::Key(e.to_string()))
}

/// A private key signatures are made with.
#[derive(Debug)]
pub struct SigningKey(EcdsaKeyPair);

impl SigningKey {
    /// Reads a PEM `PRIVATE KEY`: unencrypted PKCS#8 on P-256, as
    /// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes.
    ///
    /// # Errors
    /// It is not PEM, not PKCS#8, or not a P-256 key.
    pub fn from_pem(pem: &str) -> Result<Self, SignatureError> {
        let der = pem_block(pem, "PRIVATE KEY")?;
        EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            &der,
            &ring::rand::SystemRandom::new(),
        )
        .map(Self)
        .map_err(|e| SignatureError::Key(format!("not a PKCS#8 P-256 private key: {e}")))
    }

    /// The key its signatures verify under.
    pub fn verification_key(&self) -> VerificationKey {
        VerificationKey {
            point: self.0.public_key().as_ref().to_vec(),
        }
    }

    /// Signs `manifest`, in `repository`: the payload, and its signature
    /// (base64) as the annotation carries it.
    ///
    /// # Errors
    /// The system's randomness failed.
    pub fn sign(
        &self,
        repository: &str,
        manifest: &Digest,
    ) -> Result<(Vec<u8>, String), SignatureError> {
        let payload = payload(repository, manifest);
        let signature = self
            .0
            .sign(&ring::rand::SystemRandom::new(), &payload)
            .map_err(|_| SignatureError::Key("cannot sign: no randomness".into()))?;
        let signature = base64::engine::general_purpose::STANDARD.encode(signature.as_ref());
        Ok((payload, signature))
    }
}

/// One signed payload, as stored beside the artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    /// The payload's bytes, base64.
    pub payload: String,
    /// Its signature, base64 (the annotation's value).
    pub signature: String,
}

#[derive(Debug, Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Debug, Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    type_: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Image {
    docker_manifest_digest: String,
}

/// The simple-signing payload cosign writes for `manifest` of
/// `repository` (what a signer signs).
pub fn payload(repository: &str, manifest: &Digest) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": format!("sha256:{}", manifest.hex())},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    }))
    .expect("JSON serialises")
}

/// The tag cosign stores the signatures of `manifest` under.
pub fn signature_tag(manifest: &Digest) -> String {
    format!("sha256-{}.sig", manifest.hex())
}

/// Accepts `manifest` if one of `signed` verifies under `key` and names it.
///
/// # Errors
/// None given, none verifying, or a verifying one naming another digest.
pub fn verify(
    key: &VerificationKey,
    manifest: &Digest,
    signed: &[Signed],
) -> Result<(), SignatureError> {
    let wanted = format!("sha256:{}", manifest.hex());
    if signed.is_empty() {
        return Err(SignatureError::Missing(wanted));
    }
    let decode = |text: &str| base64::engine::general_purpose::STANDARD.decode(text).ok();
    let mut covered = None;
    for one in signed {
        let (Some(payload), Some(signature)) = (decode(&one.payload), decode(&one.signature))
        else {
            continue;
        };
        if !key.verifies(&payload, &signature) {
            continue;
        }
        match serde_json::from_slice::<Payload>(&payload) {
            Ok(p)
                if p.critical.type_ == PAYLOAD_TYPE
                    && p.critical.image.docker_manifest_digest == wanted =>
            {
                return Ok(());
            }
            Ok(p) => covered = Some(p.critical.image.docker_manifest_digest),
            Err(_) => {}
        }
    }
    Err(match covered {
        Some(covered) => SignatureError::OtherDigest { covered, wanted },
        None => SignatureError::WrongKey(wanted),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

    fn key_pair() -> EcdsaKeyPair {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap()
    }

    fn sign(pair: &EcdsaKeyPair, payload: &[u8]) -> Signed {
        let signature = pair.sign(&SystemRandom::new(), payload).unwrap();
        let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        Signed {
            payload: encode(payload),
            signature: encode(signature.as_ref()),
        }
    }

    fn public(pair: &EcdsaKeyPair) -> VerificationKey {
        VerificationKey::from_pem(&VerificationKey::pem_of_point(pair.public_key().as_ref()))
            .unwrap()
    }

    #[test]
    fn a_signature_counts_only_under_its_key_and_for_its_digest() {
        let (signer, stranger) = (key_pair(), key_pair());
        let manifest = Digest::of(b"manifest");
        let good = sign(
            &signer,
            &payload("registry.example/vigil/sorter", &manifest),
        );
        assert_eq!(
            verify(&public(&signer), &manifest, std::slice::from_ref(&good)),
            Ok(())
        );
        assert!(matches!(
            verify(&public(&stranger), &manifest, std::slice::from_ref(&good)),
            Err(SignatureError::WrongKey(_))
        ));
        assert!(matches!(
            verify(&public(&signer), &manifest, &[]),
            Err(SignatureError::Missing(_))
        ));
        let other = sign(
            &signer,
            &payload("registry.example/vigil/sorter", &Digest::of(b"other")),
        );
        assert!(matches!(
            verify(&public(&signer), &manifest, std::slice::from_ref(&other)),
            Err(SignatureError::OtherDigest { .. })
        ));
        // One good signature among others is enough.
        assert_eq!(verify(&public(&signer), &manifest, &[other, good]), Ok(()));
        // A payload changed after signing does not verify.
        let mut tampered = sign(
            &signer,
            &payload("registry.example/vigil/sorter", &manifest),
        );
        tampered.payload = base64::engine::general_purpose::STANDARD
            .encode(payload("registry.example/vigil/evil", &manifest));
        assert!(matches!(
            verify(&public(&signer), &manifest, &[tampered]),
            Err(SignatureError::WrongKey(_))
        ));
    }

    #[test]
    fn only_a_pem_p256_public_key_is_a_verification_key() {
        assert!(matches!(
            VerificationKey::from_pem("not a key"),
            Err(SignatureError::Key(_))
        ));
        let rsa_like = "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAK\n-----END PUBLIC KEY-----\n";
        assert!(matches!(
            VerificationKey::from_pem(rsa_like),
            Err(SignatureError::Key(_))
        ));
    }
}
