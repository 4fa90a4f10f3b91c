//! Shadow evaluation: a second version of a policy is asked what the
//! serving version is asked, on the same inputs, and its answers are
//! compared — never used.
//!
//! [`Shadowed`] stands where the eviction manager asks its policies: it
//! passes every call to the serving policies and answers with theirs, and
//! for a policy that has a version in shadow it keeps the call's inputs
//! (before any narrowing to the policy's interest) and the serving answer.
//! [`Shadowed::judge`], after the cycle has acted, asks the shadow versions
//! the kept calls and compares: so a shadow that is slow, faults or traps
//! costs the cycle neither its deadline nor an answer. The shadow versions
//! are called unsupervised ([`ShadowSet`]): a fault is the shadow's,
//! reported as such, and never rolls back what serves.
//!
//! What is compared is what the manager acts on: a strategy's threshold
//! (met, signal, value), its force evictions and its soft candidates in
//! order; its top victims in order; a sorter's order and its refusals.

use super::policies::{Policies, Unanswered, Which, answer};
use crate::base::report::Chain;
use crate::config::{ConfigError, VigilConfig, compare};
use crate::model::{Candidate, Decision, Eviction, MetLevel, Pod, Snapshot, Sorted, Threshold};
use crate::policy::{Declared, Policy, World};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

/// The most calls kept for the shadow between two judgements: a cycle asks
/// each strategy twice at most and the sorter a few times, so this bound is
/// only reached if nobody judges, and then the calls beyond it are not kept.
const MAX_PENDING: usize = 256;

/// The versions deciding in shadow, one per policy name, called without a
/// supervisor: their faults roll nothing back.
#[derive(Default)]
pub struct ShadowSet {
    policies: BTreeMap<String, Arc<Policy>>,
}

impl ShadowSet {
    /// The set of `policies`, each in shadow of the policy of its name.
    pub fn new(policies: impl IntoIterator<Item = Arc<Policy>>) -> Self {
        Self {
            policies: policies
                .into_iter()
                .map(|p| (p.name().to_owned(), p))
                .collect(),
        }
    }

    /// The names of the policies with a version in shadow.
    pub fn names(&self) -> BTreeSet<String> {
        self.policies.keys().cloned().collect()
    }

    fn get(&self, name: &str) -> Result<&Policy, Unanswered> {
        self.policies
            .get(name)
            .map(Arc::as_ref)
            .ok_or(Unanswered::NotLoaded)
    }
}

impl Policies for ShadowSet {
    fn version(&self, name: &str, _which: Which) -> Option<String> {
        self.get(name).ok().map(|p| p.digest().to_string())
    }

    fn declared(&self, name: &str, config: &str) -> Option<Arc<Declared>> {
        let policy = self.get(name).ok()?;
        match (policy.as_strategy(), policy.as_sorter()) {
            (Some(strategy), _) => strategy.interest(config).ok(),
            (None, Some(sorter)) => sorter.interest(config).ok(),
            (None, None) => None,
        }
    }

    fn strategies(&self) -> Vec<String> {
        (self.policies.values())
            .filter(|p| p.world() == World::EvictionStrategy)
            .map(|p| p.name().to_owned())
            .collect()
    }

    fn evaluate(&self, name: &str, snapshot: &mut Snapshot) -> Result<Decision, Unanswered> {
        let strategy = self.get(name)?.as_strategy();
        answer(strategy.ok_or(Unanswered::NotLoaded)?.evaluate(snapshot))
    }

    fn top_victims(
        &self,
        name: &str,
        snapshot: &mut Snapshot,
        scope: &str,
        n: u32,
    ) -> Result<Vec<Eviction>, Unanswered> {
        let strategy = self.get(name)?.as_strategy();
        answer(
            strategy
                .ok_or(Unanswered::NotLoaded)?
                .top_victims(snapshot, scope, n),
        )
    }

    fn sort(
        &self,
        name: &str,
        _which: Which,
        strategies: &[String],
        candidates: &mut [Candidate],
        config: &str,
    ) -> Result<Sorted, Unanswered> {
        let sorter = self.get(name)?.as_sorter();
        answer(
            sorter
                .ok_or(Unanswered::NotLoaded)?
                .sort(strategies, candidates, config),
        )
    }
}

/// Which call a comparison is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// A strategy's `evaluate`.
    Evaluate,
    /// A strategy's `top-victims`.
    TopVictims,
    /// A sorter's `sort`.
    Sort,
    /// A merger's `merge`.
    Merge,
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Evaluate => "evaluate",
            Self::TopVictims => "top-victims",
            Self::Sort => "sort",
            Self::Merge => "merge",
        })
    }
}

/// How the shadow's answer compares with the serving version's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The same decision.
    Agree,
    /// Another decision: where they first part, in words.
    Differ(String),
    /// The shadow faulted (trap, deadline, memory, contract): its message.
    Fault(String),
}

/// One call judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The policy.
    pub policy: String,
    /// The call.
    pub call: CallKind,
    /// The verdict.
    pub verdict: Verdict,
}

/// A call kept for the shadow: its inputs, as the serving version got
/// them, and the serving version's answer.
enum Kept {
    Evaluate {
        snapshot: Snapshot,
        serving: Result<Decision, Unanswered>,
    },
    TopVictims {
        snapshot: Snapshot,
        scope: String,
        n: u32,
        serving: Result<Vec<Eviction>, Unanswered>,
    },
    Sort {
        strategies: Vec<String>,
        candidates: Vec<Candidate>,
        config: String,
        serving: Result<Sorted, Unanswered>,
    },
}

/// A kept call of one policy.
struct Pending {
    policy: String,
    kept: Kept,
}

/// The versions in shadow and the names of the policies they shadow.
struct InShadow {
    policies: Arc<dyn Policies>,
    names: BTreeSet<String>,
}

/// The serving policies, with versions in shadow beside some of them.
pub struct Shadowed {
    serving: Arc<dyn Policies>,
    shadow: RwLock<InShadow>,
    pending: Mutex<Vec<Pending>>,
    /// What each strategy in shadow kept from its own last `evaluate`, and
    /// under which config: a shadow is given its own state, never the
    /// serving version's.
    states: Mutex<States>,
}

impl Shadowed {
    /// `serving`, with `shadow` asked beside it for the policies `names`.
    pub fn new(
        serving: Arc<dyn Policies>,
        shadow: Arc<dyn Policies>,
        names: BTreeSet<String>,
    ) -> Self {
        Self {
            serving,
            shadow: RwLock::new(InShadow {
                policies: shadow,
                names,
            }),
            pending: Mutex::new(Vec::new()),
            states: Mutex::new(BTreeMap::new()),
        }
    }

    /// The serving policies alone, until [`Shadowed::put`] gives some a
    /// version in shadow.
    pub fn alone(serving: Arc<dyn Policies>) -> Self {
        Self::new(serving, Arc::new(ShadowSet::default()), BTreeSet::new())
    }

    /// Puts `shadow` in shadow of the policies `names` from now on; the
    /// calls kept for the versions it replaces are dropped unjudged.
    pub fn put(&self, shadow: Arc<dyn Policies>, names: BTreeSet<String>) {
        let mut current = self.shadow.write().unwrap_or_else(|e| e.into_inner());
        *current = InShadow {
            policies: shadow,
            names,
        };
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // A new version in shadow starts afresh, as a serving one does.
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn keeps(&self, name: &str) -> bool {
        let shadow = self.shadow.read().unwrap_or_else(|e| e.into_inner());
        shadow.names.contains(name)
    }

    fn in_shadow(&self) -> Arc<dyn Policies> {
        let shadow = self.shadow.read().unwrap_or_else(|e| e.into_inner());
        Arc::clone(&shadow.policies)
    }

    fn push(&self, policy: &str, kept: Kept) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() < MAX_PENDING {
            pending.push(Pending {
                policy: policy.to_owned(),
                kept,
            });
        }
    }

    /// Asks the shadow versions every call kept since the last judgement
    /// and compares their answers with the serving ones. A call the serving
    /// version did not answer (it faulted, or was not loaded) is compared
    /// with nothing, but a fault of the shadow is always reported.
    pub fn judge(&self) -> Vec<Comparison> {
        // The versions in shadow when the calls are taken: a put after
        // this judges nothing it did not keep.
        let (pending, shadow) = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            (std::mem::take(&mut *pending), self.in_shadow())
        };
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .into_iter()
            .filter_map(|call| judge_one(shadow.as_ref(), &mut states, call))
            .collect()
    }
}

/// By strategy: the config a shadow's state was kept under, and the state.
type States = BTreeMap<String, (String, Vec<u8>)>;

/// The state the shadow of `policy` kept under `config` (none under another).
fn kept_state(states: &States, policy: &str, config: &str) -> Vec<u8> {
    match states.get(policy) {
        Some((under, state)) if under == config => state.clone(),
        _ => Vec::new(),
    }
}

/// The verdict on two merges of the same layers: what the serving merger
/// made of them (or, in words, why it refused) and what the shadow did.
pub fn merge_verdict(
    serving: Result<&VigilConfig, &str>,
    shadow: Result<VigilConfig, ConfigError>,
) -> Verdict {
    let config = |c: &VigilConfig| serde_json::to_value(c).expect("a config serialises");
    match (serving, shadow) {
        (_, Err(ConfigError::MergerFault(fault))) => Verdict::Fault(Chain(&fault).to_string()),
        (Ok(s), Ok(h)) => {
            compare::difference(&config(s), &config(&h)).map_or(Verdict::Agree, Verdict::Differ)
        }
        (Err(_), Err(_)) => Verdict::Agree,
        (Ok(_), Err(why)) => Verdict::Differ(format!("shadow refuses: {}", Chain(&why))),
        (Err(why), Ok(_)) => Verdict::Differ(format!("serving refuses ({why}), shadow merges")),
    }
}

/// Asks `shadow` one kept call and compares its answer with the serving one.
fn judge_one(shadow: &dyn Policies, states: &mut States, call: Pending) -> Option<Comparison> {
    let Pending { policy, kept } = call;
    let (call, verdict) = match kept {
        Kept::Evaluate {
            mut snapshot,
            serving,
        } => {
            snapshot.state = kept_state(states, &policy, &snapshot.config);
            let mut shadow = shadow.evaluate(&policy, &mut snapshot);
            if let Ok(decision) = &mut shadow
                && let Some(state) = decision.state.take()
            {
                states.insert(policy.clone(), (snapshot.config.clone(), state));
            }
            let named = Described::Pods(&snapshot.pods);
            let verdict = verdict(serving, shadow, |s, h| decisions(&named, s, h));
            (CallKind::Evaluate, verdict)
        }
        Kept::TopVictims {
            mut snapshot,
            scope,
            n,
            serving,
        } => {
            snapshot.state = kept_state(states, &policy, &snapshot.config);
            let shadow = shadow.top_victims(&policy, &mut snapshot, &scope, n);
            let named = Described::Pods(&snapshot.pods);
            let verdict = verdict(serving, shadow, |s, h| {
                ranks(&uids(&named, s), &uids(&named, h), "picks")
            });
            (CallKind::TopVictims, verdict)
        }
        Kept::Sort {
            strategies,
            mut candidates,
            config,
            serving,
        } => {
            let shadow = shadow.sort(
                &policy,
                Which::Serving,
                &strategies,
                &mut candidates,
                &config,
            );
            let named = Described::Candidates(&candidates);
            let verdict = verdict(serving, shadow, |s, h| sorted(&named, s, h));
            (CallKind::Sort, verdict)
        }
    };
    Some(Comparison {
        policy,
        call,
        verdict: verdict?,
    })
}

/// What names the pods an answer refers to (the shadow's inputs, given
/// back as they were after its call).
enum Described<'a> {
    /// A snapshot's pods, by UID.
    Pods(&'a [Pod]),
    /// The candidates, by index.
    Candidates(&'a [Candidate]),
}

impl Described<'_> {
    fn uid(&self, uid: &str) -> String {
        let pods: &[Pod] = match self {
            Self::Pods(pods) => pods,
            Self::Candidates(_) => &[],
        };
        pods.iter()
            .find(|p| p.uid == uid)
            .map_or_else(|| format!("pod {uid}"), pod_name)
    }

    fn index(&self, index: u32) -> String {
        match self {
            Self::Candidates(candidates) => candidates
                .get(index as usize)
                .map_or_else(|| format!("candidate {index}"), |c| pod_name(&c.pod)),
            Self::Pods(_) => format!("candidate {index}"),
        }
    }
}

fn pod_name(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// The verdict on two answers to one call, `differ` naming where two
/// answers part; `None` when there is nothing to compare.
fn verdict<T>(
    serving: Result<T, Unanswered>,
    shadow: Result<T, Unanswered>,
    differ: impl FnOnce(&T, &T) -> Option<String>,
) -> Option<Verdict> {
    let difference = match (serving, shadow) {
        (_, Err(Unanswered::Fault { message, .. })) => return Some(Verdict::Fault(message)),
        (_, Err(Unanswered::NotLoaded))
        | (Err(Unanswered::NotLoaded | Unanswered::Fault { .. }), _) => return None,
        (Err(Unanswered::Declined(_)), Err(Unanswered::Declined(_))) => None,
        (Err(Unanswered::Declined(reason)), Ok(_)) => {
            Some(format!("serving declined ({reason}), shadow answered"))
        }
        (Ok(_), Err(Unanswered::Declined(reason))) => Some(format!("shadow declined: {reason}")),
        (Ok(s), Ok(h)) => differ(&s, &h),
    };
    Some(difference.map_or(Verdict::Agree, Verdict::Differ))
}

/// Where two thresholds of one scope part: how they are met, then what
/// they compare.
fn thresholds(s: &Threshold, h: &Threshold) -> Option<String> {
    if s.met != h.met {
        return Some(format!(
            "serving finds {} {} ({} against {}), shadow {} ({} against {})",
            s.signal,
            met(s.met),
            s.observed,
            s.threshold,
            met(h.met),
            h.observed,
            h.threshold
        ));
    }
    if s.signal != h.signal || s.threshold != h.threshold {
        return Some(format!(
            "serving holds {} to {}, shadow {} to {}",
            s.signal, s.threshold, h.signal, h.threshold
        ));
    }
    None
}

fn uids(described: &Described<'_>, evictions: &[Eviction]) -> Vec<String> {
    evictions.iter().map(|e| described.uid(&e.uid)).collect()
}

/// Where two strategy decisions first part: the thresholds (scope by
/// scope), then the force evictions, then the soft candidates.
fn decisions(described: &Described<'_>, serving: &Decision, shadow: &Decision) -> Option<String> {
    let scopes =
        |d: &Decision| -> Vec<String> { d.thresholds.iter().map(|t| t.scope.clone()).collect() };
    if scopes(serving) != scopes(shadow) {
        return Some(format!(
            "serving reports scopes [{}], shadow [{}]",
            scopes(serving).join(", "),
            scopes(shadow).join(", ")
        ));
    }
    for (s, h) in serving.thresholds.iter().zip(&shadow.thresholds) {
        if let Some(difference) = thresholds(s, h) {
            return Some(difference);
        }
    }
    let force = |d: &Decision| -> BTreeSet<String> {
        uids(described, &d.force_evictions).into_iter().collect()
    };
    let (sf, hf) = (force(serving), force(shadow));
    if sf != hf {
        let list = |set: &BTreeSet<String>| {
            if set.is_empty() {
                "nobody".to_owned()
            } else {
                set.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        };
        return Some(format!(
            "serving force-evicts {}, shadow {}",
            list(&sf),
            list(&hf)
        ));
    }
    ranks(
        &uids(described, &serving.soft_candidates),
        &uids(described, &shadow.soft_candidates),
        "proposes",
    )
}

fn met(level: MetLevel) -> &'static str {
    match level {
        MetLevel::NotMet => "not met",
        MetLevel::Report => "met to report",
        MetLevel::Soft => "met soft",
        MetLevel::Hard => "met hard",
    }
}

/// Where two sorters' answers first part: the order, then the refusals.
fn sorted(described: &Described<'_>, serving: &Sorted, shadow: &Sorted) -> Option<String> {
    let order =
        |s: &Sorted| -> Vec<String> { s.order.iter().map(|&i| described.index(i)).collect() };
    if let Some(words) = ranks(&order(serving), &order(shadow), "evicts") {
        return Some(words);
    }
    let refused = |s: &Sorted| -> BTreeMap<u32, String> {
        s.rejected
            .iter()
            .map(|r| (r.index, r.reason.clone()))
            .collect()
    };
    let (sr, hr) = (refused(serving), refused(shadow));
    let only = |a: &BTreeMap<u32, String>, b: &BTreeMap<u32, String>| {
        a.iter()
            .find(|(i, _)| !b.contains_key(i))
            .map(|(&i, reason)| (described.index(i), reason.clone()))
    };
    if let Some((pod, reason)) = only(&hr, &sr) {
        return Some(format!("shadow refuses {pod} ({reason}), serving does not"));
    }
    only(&sr, &hr).map(|(pod, reason)| format!("serving refuses {pod} ({reason}), shadow does not"))
}

/// The first rank at which two lists of pods differ, in words.
fn ranks(serving: &[String], shadow: &[String], verb: &str) -> Option<String> {
    let longest = serving.len().max(shadow.len());
    (0..longest).find_map(|i| {
        let (s, h) = (serving.get(i), shadow.get(i));
        (s != h).then(|| {
            let name = |p: Option<&String>| p.map_or("nobody", String::as_str).to_owned();
            format!(
                "serving {verb} {} (rank {}), shadow {verb} {}",
                name(s),
                i + 1,
                name(h)
            )
        })
    })
}

impl Policies for Shadowed {
    fn strategies(&self) -> Vec<String> {
        self.serving.strategies()
    }

    fn version(&self, name: &str, which: Which) -> Option<String> {
        self.serving.version(name, which)
    }

    fn declared(&self, name: &str, config: &str) -> Option<Arc<Declared>> {
        self.serving.declared(name, config)
    }

    fn evaluate(&self, name: &str, snapshot: &mut Snapshot) -> Result<Decision, Unanswered> {
        let kept = self.keeps(name).then(|| snapshot.clone());
        let answer = self.serving.evaluate(name, snapshot);
        if let Some(snapshot) = kept {
            let serving = answer.clone();
            self.push(name, Kept::Evaluate { snapshot, serving });
        }
        answer
    }

    fn top_victims(
        &self,
        name: &str,
        snapshot: &mut Snapshot,
        scope: &str,
        n: u32,
    ) -> Result<Vec<Eviction>, Unanswered> {
        let kept = self.keeps(name).then(|| snapshot.clone());
        let answer = self.serving.top_victims(name, snapshot, scope, n);
        if let Some(snapshot) = kept {
            let scope = scope.to_owned();
            let serving = answer.clone();
            self.push(
                name,
                Kept::TopVictims {
                    snapshot,
                    scope,
                    n,
                    serving,
                },
            );
        }
        answer
    }

    fn sort(
        &self,
        name: &str,
        which: Which,
        strategies: &[String],
        candidates: &mut [Candidate],
        config: &str,
    ) -> Result<Sorted, Unanswered> {
        // The built-in asked in place of a faulting sorter has no shadow.
        let kept = (which == Which::Serving && self.keeps(name)).then(|| candidates.to_vec());
        let answer = (self.serving).sort(name, which, strategies, candidates, config);
        if let Some(candidates) = kept {
            self.push(
                name,
                Kept::Sort {
                    strategies: strategies.to_vec(),
                    candidates,
                    config: config.to_owned(),
                    serving: answer.clone(),
                },
            );
        }
        answer
    }
}

#[cfg(test)]
mod tests;
