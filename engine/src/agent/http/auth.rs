//! Who may read `/metrics` under `--metrics-auth=kubernetes`: the bearer
//! token a scraper presents is reviewed by the API server (a `TokenReview`:
//! whose it is) and that user's right checked (a `SubjectAccessReview`: may
//! it `get` the non-resource URL `/metrics`), as the kubelet and
//! controller-runtime's secure metrics do. `/healthz` and `/readyz` stay
//! open: the kubelet's probes carry no token.
//!
//! Every node pays for it, so answers are kept per token (by its SHA-256,
//! never the token): an allowed one two minutes, a refusal thirty seconds,
//! at most 64 tokens. A scraper every 30 s costs the API server two requests
//! per node every two minutes. Reviews are rate-limited (a burst of 8, then
//! one every two seconds), so a client sending fresh tokens cannot turn the
//! agent against the API server; and while the API server cannot answer, a
//! token allowed within ten minutes stays allowed, so the fleet's metrics
//! do not go dark in the brownout they are needed for.

use crate::base::digest::Digest;
use crate::base::rate::TokenBucket;
use crate::metrics::TokenReviewResult;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How long an allowed token is taken without a new review.
const ALLOWED_FOR: Duration = Duration::from_secs(120);
/// How long a refused token is refused without a new review.
const REFUSED_FOR: Duration = Duration::from_secs(30);
/// While the API server cannot answer, a token allowed this recently stays
/// allowed.
const STALE_FOR: Duration = Duration::from_secs(600);
/// The most tokens whose answers are kept; one more drops the oldest.
const TOKENS_KEPT: usize = 64;
/// Reviews: a burst of this many, then [`REVIEWS_PER_SECOND`].
const REVIEW_BURST: u32 = 8;
const REVIEWS_PER_SECOND: f64 = 0.5;

/// The path whose right is checked, and the verb.
const PATH: &str = "/metrics";
const VERB: &str = "get";

/// Whether a request may read the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its token's user may `get` `/metrics`.
    Allowed,
    /// No bearer token, or one the API server does not take (401).
    Unauthenticated(String),
    /// The token's user may not (403).
    Forbidden(String),
    /// The API server could not answer, or reviews are over their rate
    /// (503).
    Unavailable(String),
}

impl Verdict {
    /// As the review metric counts it.
    fn result(&self) -> TokenReviewResult {
        match self {
            Self::Allowed => TokenReviewResult::Allowed,
            Self::Unauthenticated(_) => TokenReviewResult::Unauthenticated,
            Self::Forbidden(_) => TokenReviewResult::Forbidden,
            Self::Unavailable(_) => TokenReviewResult::Unavailable,
        }
    }
}

/// A verdict and when it was reached.
#[derive(Debug, Clone)]
struct Answer {
    verdict: Verdict,
    at: Instant,
}

/// The answers kept, and the reviews' rate.
#[derive(Debug)]
struct Answers {
    by_token: HashMap<Digest, Answer>,
    reviews: TokenBucket,
}

impl Answers {
    fn new(now: Instant) -> Self {
        Self {
            by_token: HashMap::new(),
            reviews: TokenBucket::new(REVIEWS_PER_SECOND, REVIEW_BURST, now),
        }
    }

    /// The kept verdict for `token` if it is still fresh at `now`.
    fn fresh(&self, token: &Digest, now: Instant) -> Option<Verdict> {
        let answer = self.by_token.get(token)?;
        let lasts = match answer.verdict {
            Verdict::Allowed => ALLOWED_FOR,
            _ => REFUSED_FOR,
        };
        (now.saturating_duration_since(answer.at) < lasts).then(|| answer.verdict.clone())
    }

    /// Whether a review may be made at `now`.
    fn may_review(&mut self, now: Instant) -> bool {
        self.reviews.take(now).is_ok()
    }

    /// What a request with `token` gets when the review said `verdict` (or,
    /// `None`, was not made: over the rate) at `now`; keeps it.
    fn settle(&mut self, token: Digest, verdict: Option<Verdict>, now: Instant) -> Verdict {
        let verdict = match verdict {
            Some(Verdict::Unavailable(why)) => Err(why),
            None => Err("too many token reviews; try again shortly".to_owned()),
            Some(verdict) => Ok(verdict),
        };
        match verdict {
            Ok(verdict) => {
                if !self.by_token.contains_key(&token) && self.by_token.len() >= TOKENS_KEPT {
                    let oldest = (self.by_token.iter())
                        .min_by_key(|(_, answer)| answer.at)
                        .map(|(token, _)| *token);
                    oldest.map(|oldest| self.by_token.remove(&oldest));
                }
                let at = now;
                (self.by_token).insert(
                    token,
                    Answer {
                        verdict: verdict.clone(),
                        at,
                    },
                );
                verdict
            }
            Err(why) => match self.by_token.get(&token) {
                Some(Answer {
                    verdict: Verdict::Allowed,
                    at,
                }) if now.saturating_duration_since(*at) < STALE_FOR => Verdict::Allowed,
                _ => Verdict::Unavailable(why),
            },
        }
    }
}

/// Reviews the tokens of requests for `/metrics` (see the module's docs).
pub(crate) struct Reviewer {
    client: kube::Client,
    answers: Mutex<Answers>,
}

impl Reviewer {
    /// Reviews through `client` (the agent's own identity, which may create
    /// `tokenreviews` and `subjectaccessreviews`: what
    /// `system:auth-delegator` holds, on the agent's own role).
    pub(crate) fn new(client: kube::Client, now: Instant) -> Self {
        Self {
            client,
            answers: Mutex::new(Answers::new(now)),
        }
    }

    /// Whether a request carrying `authorization` (its header's value) may
    /// read the metrics at `now`, and what the API server said if it was
    /// asked.
    pub(crate) async fn check(
        &self,
        authorization: Option<&[u8]>,
        now: Instant,
    ) -> (Verdict, Option<TokenReviewResult>) {
        let Some(token) = bearer(authorization) else {
            let why = "a bearer token is required (Authorization: Bearer TOKEN)";
            return (Verdict::Unauthenticated(why.into()), None);
        };
        let key = Digest::of(token.as_bytes());
        let may_review = {
            let mut answers = self.answers.lock().await;
            if let Some(verdict) = answers.fresh(&key, now) {
                return (verdict, None);
            }
            answers.may_review(now)
        };
        let reviewed = if may_review {
            Some(self.review(token).await)
        } else {
            None
        };
        let result = reviewed.as_ref().map(Verdict::result);
        let verdict = self.answers.lock().await.settle(key, reviewed, now);
        (verdict, result)
    }

    /// Asks the API server whose `token` is, and whether that user may read
    /// the metrics.
    async fn review(&self, token: &str) -> Verdict {
        let post = PostParams::default();
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&post, &review)
            .await
        {
            Ok(reviewed) => reviewed.status.unwrap_or_default(),
            Err(error) => return Verdict::Unavailable(format!("the token review failed: {error}")),
        };
        if reviewed.authenticated != Some(true) {
            let why = reviewed
                .error
                .unwrap_or_else(|| "the token is not valid".into());
            return Verdict::Unauthenticated(why);
        }
        let user = reviewed.user.unwrap_or_default();
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(PATH.into()),
                    verb: Some(VERB.into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&post, &access)
            .await
        {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => Verdict::Allowed,
            Ok(_) => Verdict::Forbidden(format!("{name} may not {VERB} {PATH}")),
            Err(error) => Verdict::Unavailable(format!("the access review failed: {error}")),
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(authorization: Option<&[u8]>) -> Option<&str> {
    let value = std::str::from_utf8(authorization?).ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_graphic()))
    .then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_a_token() {
        assert_eq!(bearer(Some(b"Bearer abc.def")), Some("abc.def"));
        assert_eq!(bearer(Some(b"bearer  abc ")), Some("abc"));
        for refused in [
            &b"Basic dXNlcjpwYXNz"[..],
            b"Bearer",
            b"Bearer ",
            b"Bearer a b",
            b"\xff\xfe",
        ] {
            assert_eq!(bearer(Some(refused)), None, "{refused:?}");
        }
        assert_eq!(bearer(None), None);
    }

    fn token(n: u32) -> Digest {
        Digest::of(&n.to_be_bytes())
    }

    #[test]
    fn an_answer_is_kept_two_minutes_when_allowed_and_thirty_seconds_when_not() {
        let start = Instant::now();
        let mut answers = Answers::new(start);
        answers.settle(token(1), Some(Verdict::Allowed), start);
        let refused = Verdict::Forbidden("no".into());
        answers.settle(token(2), Some(refused.clone()), start);
        let at = |secs| start + Duration::from_secs(secs);
        assert_eq!(answers.fresh(&token(1), at(119)), Some(Verdict::Allowed));
        assert_eq!(answers.fresh(&token(1), at(120)), None);
        assert_eq!(answers.fresh(&token(2), at(29)), Some(refused));
        assert_eq!(answers.fresh(&token(2), at(30)), None);
        assert_eq!(answers.fresh(&token(3), start), None);
    }

    #[test]
    fn while_the_api_server_cannot_answer_a_recently_allowed_token_stays_allowed() {
        let start = Instant::now();
        let mut answers = Answers::new(start);
        answers.settle(token(1), Some(Verdict::Allowed), start);
        let down = || Some(Verdict::Unavailable("connection refused".into()));
        let at = |secs| start + Duration::from_secs(secs);
        assert_eq!(answers.settle(token(1), down(), at(599)), Verdict::Allowed);
        assert!(matches!(
            answers.settle(token(1), down(), at(600)),
            Verdict::Unavailable(_)
        ));
        // A token never allowed is not let in by the outage.
        assert!(matches!(
            answers.settle(token(2), down(), at(1)),
            Verdict::Unavailable(_)
        ));
        // A refusal is not kept as if it were the API server's answer.
        assert_eq!(answers.fresh(&token(2), at(2)), None);
    }

    #[test]
    fn reviews_are_rate_limited_and_the_oldest_answer_makes_room() {
        let start = Instant::now();
        let mut answers = Answers::new(start);
        let granted = (0..20).filter(|_| answers.may_review(start)).count();
        assert_eq!(granted, REVIEW_BURST as usize);
        assert!(answers.may_review(start + Duration::from_secs(2)));
        let over = answers.settle(token(0), None, start);
        assert!(matches!(over, Verdict::Unavailable(why) if why.contains("too many")));

        for n in 0..=TOKENS_KEPT as u32 {
            let at = start + Duration::from_millis(u64::from(n));
            answers.settle(token(n), Some(Verdict::Allowed), at);
        }
        assert_eq!(answers.by_token.len(), TOKENS_KEPT);
        let last = start + Duration::from_millis(TOKENS_KEPT as u64);
        assert_eq!(answers.fresh(&token(0), last), None, "the oldest made room");
        assert_eq!(
            answers.fresh(&token(TOKENS_KEPT as u32), last),
            Some(Verdict::Allowed)
        );
    }
}
