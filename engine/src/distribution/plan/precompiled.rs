//! Which precompiled artifact of a version the pull controller brings into
//! the host's artifact cache, and what it means when there is none: a
//! decision on the host's compile mode, what its cache holds, whether a
//! native-code key is configured and the policy's `spec.precompiled`.

use crate::distribution::crd::PrecompiledRef;
use crate::distribution::pull::PullError;
use crate::policy::CompileMode;

/// How many times larger than a component its precompiled artifact may be
/// (a JavaScript component's is about three times its size).
pub(crate) const ARTIFACT_CAP_FACTOR: u64 = 4;

/// The largest precompiled artifact taken for components of at most `cap`
/// bytes.
pub(crate) fn artifact_cap(cap: u64) -> u64 {
    cap.saturating_mul(ARTIFACT_CAP_FACTOR)
}

/// What to do about a version's precompiled artifact.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Search<'a> {
    /// Nothing: the host compiles everything itself (`--compile=always`).
    NotTaken,
    /// Nothing: the host's cache holds the artifact already.
    Held,
    /// No artifact can be verified: no native-code key is configured.
    NoKey,
    /// Try these, in order, until one is of the version's component.
    Try(Vec<&'a PrecompiledRef>),
}

/// The search for the artifact of a version for the engine `engine_key`,
/// among `offered` (the policy's `spec.precompiled`).
pub(crate) fn search<'a>(
    mode: CompileMode,
    held: bool,
    key_configured: bool,
    offered: &'a [PrecompiledRef],
    engine_key: &str,
) -> Search<'a> {
    if !mode.takes_precompiled() {
        Search::NotTaken
    } else if held {
        Search::Held
    } else if !key_configured {
        Search::NoKey
    } else {
        Search::Try(
            offered
                .iter()
                .filter(|p| p.engine_key == engine_key)
                .collect(),
        )
    }
}

/// What a version without an artifact for this engine comes to: compiled
/// on the node, or — when the host compiles nothing — refused for `why`.
///
/// # Errors
/// The host compiles nothing (`--compile=never`).
pub(crate) fn without_artifact(mode: CompileMode, why: String) -> Result<(), PullError> {
    match mode {
        CompileMode::Never => Err(PullError::NotPrecompiled(why)),
        CompileMode::Fallback | CompileMode::Always => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(engine_key: &str, reference: &str) -> PrecompiledRef {
        PrecompiledRef {
            engine_key: engine_key.to_owned(),
            reference: reference.to_owned(),
        }
    }

    #[test]
    fn only_this_engines_artifacts_are_tried_and_only_when_the_host_takes_them_and_lacks_one() {
        let all = [
            offered("aa", "r/a@sha256:1"),
            offered("bb", "r/b@sha256:2"),
            offered("aa", "r/c@sha256:3"),
        ];
        let Search::Try(tried) = search(CompileMode::Fallback, false, true, &all, "aa") else {
            panic!("a fallback host without the artifact tries this engine's");
        };
        let tried: Vec<&str> = tried.iter().map(|p| p.reference.as_str()).collect();
        assert_eq!(tried, ["r/a@sha256:1", "r/c@sha256:3"]);
        assert_eq!(
            search(CompileMode::Never, false, true, &all, "cc"),
            Search::Try(Vec::new())
        );
        assert_eq!(
            search(CompileMode::Always, false, true, &all, "aa"),
            Search::NotTaken
        );
        assert_eq!(
            search(CompileMode::Never, true, true, &all, "aa"),
            Search::Held
        );
        assert_eq!(
            search(CompileMode::Fallback, false, false, &all, "aa"),
            Search::NoKey
        );
    }

    #[test]
    fn a_missing_artifact_refuses_the_version_only_where_nothing_compiles() {
        assert!(without_artifact(CompileMode::Fallback, "none".into()).is_ok());
        assert!(without_artifact(CompileMode::Always, "none".into()).is_ok());
        let refused = without_artifact(CompileMode::Never, "none for aa".into()).unwrap_err();
        assert!(matches!(refused, PullError::NotPrecompiled(ref why) if why == "none for aa"));
        assert_eq!(artifact_cap(10), 40);
        assert_eq!(artifact_cap(u64::MAX), u64::MAX);
    }
}
