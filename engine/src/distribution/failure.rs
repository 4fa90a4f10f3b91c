//! Why a pull failed ([`PullError`]), and the kind of each failure as
//! metrics and statuses name it ([`PullReason`]): the registry's answers,
//! the store's and the checks' refusals, each mapped to one kind.

use super::signature::SignatureError;
use super::store::StoreError;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use thiserror::Error;

/// Why a pull failed; [`PullError::reason`] names the kind for statuses
/// and metrics.
#[derive(Debug, Error)]
pub enum PullError {
    /// The reference does not parse or is not pinned.
    #[error("bad reference: {0}")]
    Reference(String),
    /// The credentials named for the registry cannot be read.
    #[error("no credentials: {0}")]
    Credentials(String),
    /// The registry wants credentials it was not given, or refused them.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The registry has no such manifest or blob.
    #[error("not found: {0}")]
    NotFound(String),
    /// The registry could not be reached or failed.
    #[error("registry unavailable: {0}")]
    Unavailable(String),
    /// What arrived is not what the digest pins.
    #[error("tampered: {0}")]
    Tampered(String),
    /// The manifest is not a policy artifact's.
    #[error("not a policy artifact: {0}")]
    Layout(String),
    /// No signature under the verification key covers the artifact.
    #[error("not signed: {0}")]
    Signature(#[from] SignatureError),
    /// A precompiled artifact made from another component.
    #[error("another component's: {0}")]
    OtherComponent(String),
    /// A precompiled artifact made for another engine (target, CPU
    /// baseline, vigil build).
    #[error("incompatible: {0}")]
    Incompatible(String),
    /// The agent compiles nothing and has no precompiled artifact to take.
    #[error("not precompiled: {0}")]
    NotPrecompiled(String),
    /// A layer, manifest or signature is larger than its cap.
    #[error("oversized: {what}, over the cap of {cap} bytes")]
    Oversized {
        /// What it is and how large it says or turned out to be.
        what: String,
        /// The cap.
        cap: u64,
    },
    /// The store could not be written.
    #[error("cannot store it: {0}")]
    Store(#[source] std::io::Error),
}

impl PullError {
    /// The kind, as a metric label and a status reason.
    pub fn reason(&self) -> PullReason {
        match self {
            Self::Reference(_) => PullReason::Reference,
            Self::Credentials(_) => PullReason::Credentials,
            Self::Unauthorized(_) => PullReason::Unauthorized,
            Self::NotFound(_) => PullReason::NotFound,
            Self::Unavailable(_) => PullReason::Unavailable,
            Self::Tampered(_) => PullReason::Tampered,
            Self::Layout(_) => PullReason::Layout,
            Self::OtherComponent(_) => PullReason::OtherComponent,
            Self::Incompatible(_) => PullReason::Incompatible,
            Self::NotPrecompiled(_) => PullReason::NotPrecompiled,
            Self::Oversized { .. } => PullReason::Oversized,
            Self::Signature(_) => PullReason::Signature,
            Self::Store(_) => PullReason::Store,
        }
    }
}

/// Why a pull failed, as a metric label and a status reason show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullReason {
    /// `reference`: not a pinned reference.
    Reference,
    /// `credentials`: the pull Secret gives none.
    Credentials,
    /// `unauthorized`: the registry refused the credentials, or wants some.
    Unauthorized,
    /// `not-found`: no such manifest or blob.
    NotFound,
    /// `unavailable`: the registry could not be reached or failed.
    Unavailable,
    /// `tampered`: what arrived is not what the digest pins.
    Tampered,
    /// `layout`: not a policy artifact.
    Layout,
    /// `other-component`: a precompiled artifact of another component.
    OtherComponent,
    /// `incompatible`: a precompiled artifact for another engine.
    Incompatible,
    /// `not-precompiled`: nothing precompiled, and the host compiles nothing.
    NotPrecompiled,
    /// `oversized`: over the cap.
    Oversized,
    /// `signature`: no signature under the key covers it.
    Signature,
    /// `store`: the store could not be written.
    Store,
}

impl PullReason {
    /// As metrics and status objects show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reference => "reference",
            Self::Credentials => "credentials",
            Self::Unauthorized => "unauthorized",
            Self::NotFound => "not-found",
            Self::Unavailable => "unavailable",
            Self::Tampered => "tampered",
            Self::Layout => "layout",
            Self::OtherComponent => "other-component",
            Self::Incompatible => "incompatible",
            Self::NotPrecompiled => "not-precompiled",
            Self::Oversized => "oversized",
            Self::Signature => "signature",
            Self::Store => "store",
        }
    }

    /// Whether the registry's credentials may have changed under this
    /// failure, so the pull Secret is read again before the next try.
    pub fn refreshes_credentials(self) -> bool {
        matches!(self, Self::Credentials | Self::Unauthorized)
    }
}

impl From<OciDistributionError> for PullError {
    fn from(error: OciDistributionError) -> Self {
        let text = error.to_string();
        match &error {
            OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. } => Self::Unauthorized(text),
            OciDistributionError::RegistryError { envelope, .. } => {
                let codes = || envelope.errors.iter().map(|e| &e.code);
                if codes().any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
                    Self::Unauthorized(text)
                } else if codes().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::NotFound
                    )
                }) {
                    Self::NotFound(text)
                } else {
                    Self::Unavailable(text)
                }
            }
            OciDistributionError::ServerError {
                code: 401 | 403, ..
            } => Self::Unauthorized(text),
            OciDistributionError::ServerError { code: 404, .. }
            | OciDistributionError::ImageManifestNotFoundError(_) => Self::NotFound(text),
            OciDistributionError::DigestError(_) => Self::Tampered(text),
            OciDistributionError::UnsupportedMediaTypeError(_)
            | OciDistributionError::UnsupportedSchemaVersionError(_)
            | OciDistributionError::VersionedParsingError(_)
            | OciDistributionError::ManifestParsingError(_) => Self::Layout(text),
            _ => Self::Unavailable(text),
        }
    }
}

impl From<StoreError> for PullError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Oversized { .. } | StoreError::Mismatch { .. } => {
                Self::Tampered(error.to_string())
            }
            StoreError::Io(e) => Self::Store(e),
        }
    }
}
