//! What the eviction manager needs from policies, as a trait of its own:
//! the registry implements it with WebAssembly components, the manager's unit
//! tests with an in-memory fake. The manager never sees a component.

use crate::base::report::Chain;
use crate::model::{Candidate, Decision, Eviction, Snapshot, Sorted};
use crate::policy::{Declared, FaultKind, Registry, World};
use std::fmt;
use std::sync::Arc;

/// Why a policy gave no answer this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// No policy of that name and world serves.
    NotLoaded,
    /// The policy answered with a refusal (the WIT `result`'s `err`).
    Declined(String),
    /// The call faulted: trap, deadline, memory limit, contract breach.
    Fault {
        /// What kind of fault.
        kind: FaultKind,
        /// The fault, with its causes, as one line.
        message: String,
    },
}

impl fmt::Display for Unanswered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLoaded => f.write_str("is not loaded"),
            Self::Declined(reason) => write!(f, "declined: {reason}"),
            Self::Fault { message, .. } => f.write_str(message),
        }
    }
}

/// The policies the eviction manager decides with.
pub trait Policies: Send + Sync {
    /// Names of the eviction strategies that serve now.
    fn strategies(&self) -> Vec<String>;

    /// The version of policy `name` (the one `which` says) that answers
    /// now: its component digest's first 12 digits; `None` if unknown.
    fn version(&self, _name: &str, _which: Which) -> Option<String> {
        None
    }

    /// What strategy or sorter `name` declared it reads under `config`
    /// (signals beyond the kubelet's, pod facts, labels); none if it cannot
    /// say (not loaded, or faulting in its interest). Required, not
    /// defaulted: a wrapper that forgot to pass it on would leave the node
    /// source reading nothing a policy asked for.
    fn declared(&self, name: &str, config: &str) -> Option<Arc<Declared>>;

    /// Asks strategy `name` to judge `snapshot` (lent mutably so its pods can
    /// be narrowed to what the strategy reads; they are given back as they
    /// were).
    ///
    /// # Errors
    /// The strategy is not loaded, declined or faulted.
    fn evaluate(&self, name: &str, snapshot: &mut Snapshot) -> Result<Decision, Unanswered>;

    /// Asks strategy `name` for at most `n` victims for `scope`, best first.
    ///
    /// # Errors
    /// As [`Policies::evaluate`].
    fn top_victims(
        &self,
        name: &str,
        snapshot: &mut Snapshot,
        scope: &str,
        n: u32,
    ) -> Result<Vec<Eviction>, Unanswered>;

    /// Asks sorter `name` (the one `which` says) to validate and order
    /// `candidates`, proposed by `strategies` (lent mutably as
    /// [`Policies::evaluate`]'s snapshot is).
    ///
    /// # Errors
    /// The sorter is not loaded, declined or faulted.
    fn sort(
        &self,
        name: &str,
        which: Which,
        strategies: &[String],
        candidates: &mut [Candidate],
        config: &str,
    ) -> Result<Sorted, Unanswered>;
}

/// Which policy of a name is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The version serving now (a file's, a pulled one, or the built-in).
    Serving,
    /// The one built into the binary, whatever serves.
    BuiltIn,
}

pub(super) fn answer<T>(outcome: crate::policy::Outcome<T, String>) -> Result<T, Unanswered> {
    match outcome {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(reason)) => Err(Unanswered::Declined(reason)),
        Err(fault) => Err(Unanswered::Fault {
            kind: fault.kind(),
            message: Chain(&fault).to_string(),
        }),
    }
}

impl Policies for Registry {
    fn strategies(&self) -> Vec<String> {
        self.of_world(World::EvictionStrategy)
            .iter()
            .map(|p| p.name().to_owned())
            .collect()
    }

    fn version(&self, name: &str, which: Which) -> Option<String> {
        let policy = match which {
            Which::Serving => self.get(name),
            Which::BuiltIn => self.builtin(name),
        };
        policy.map(|p| p.digest().to_string())
    }

    fn declared(&self, name: &str, config: &str) -> Option<Arc<Declared>> {
        let policy = self.get(name)?;
        let declared = match (self.strategy(&policy), self.sorter(&policy)) {
            (Some(strategy), _) => strategy.interest(config),
            (None, Some(sorter)) => sorter.interest(config),
            (None, None) => return None,
        };
        declared.ok()
    }

    fn evaluate(&self, name: &str, snapshot: &mut Snapshot) -> Result<Decision, Unanswered> {
        let policy = self.get(name).ok_or(Unanswered::NotLoaded)?;
        let strategy = self.strategy(&policy).ok_or(Unanswered::NotLoaded)?;
        answer(strategy.evaluate(snapshot))
    }

    fn top_victims(
        &self,
        name: &str,
        snapshot: &mut Snapshot,
        scope: &str,
        n: u32,
    ) -> Result<Vec<Eviction>, Unanswered> {
        let policy = self.get(name).ok_or(Unanswered::NotLoaded)?;
        let strategy = self.strategy(&policy).ok_or(Unanswered::NotLoaded)?;
        answer(strategy.top_victims(snapshot, scope, n))
    }

    fn sort(
        &self,
        name: &str,
        which: Which,
        strategies: &[String],
        candidates: &mut [Candidate],
        config: &str,
    ) -> Result<Sorted, Unanswered> {
        let policy = match which {
            Which::Serving => self.get(name),
            Which::BuiltIn => self.builtin(name),
        };
        let policy = policy.ok_or(Unanswered::NotLoaded)?;
        let sorter = self.sorter(&policy).ok_or(Unanswered::NotLoaded)?;
        answer(sorter.sort(strategies, candidates, config))
    }
}
