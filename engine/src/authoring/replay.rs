//! `vigil policy test`: one call of a policy's export on input given as
//! data, and its answer as data — a unit-test runner for policies in any
//! language. A strategy's input is a node (what `vigil simulate --output json
//! --snapshots` writes in each step), a sorter's a candidate list, a
//! merger's a list of layers; field names are the WIT ones in snake_case, and
//! pods and candidates may be written in part ([`crate::model::PartialPod`]).

use crate::model::bindings::{Candidate, Layer, Snapshot};
use crate::model::{SnapshotData, partial_candidates};
use crate::policy::{Fault, Policy, World};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The threshold `top-victims` is asked for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopVictims {
    /// The threshold's scope, as `evaluate` reported it.
    pub scope: String,
    /// How many victims at most.
    pub n: u32,
}

/// A config layer; `json` may be written as JSON text or as a value.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerInput {
    /// Where it comes from.
    pub source: String,
    /// Its content.
    pub json: serde_json::Value,
}

/// What to call, given as data: the fields of one world.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// A strategy's node: `evaluate` is called on it…
    pub snapshot: Option<SnapshotData>,
    /// …or `top-victims` for this threshold.
    pub top_victims: Option<TopVictims>,
    /// A sorter's strategy names (what each candidate's `strategy` indexes).
    pub strategies: Option<Vec<String>>,
    /// A sorter's candidates, each may be written in part.
    #[serde(default, deserialize_with = "partial_candidates")]
    pub candidates: Option<Vec<Candidate>>,
    /// A merger's layers, defaults first.
    pub layers: Option<Vec<LayerInput>>,
}

/// What the call answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The export's answer.
    Answer(serde_json::Value),
    /// The policy declined (the WIT `result`'s `err`), and why.
    Declined(serde_json::Value),
    /// The call faulted: trapped, ran out of time or memory, or answered
    /// against the contract.
    Fault(String),
}

/// Why the input does not fit the policy.
#[derive(Debug, Error)]
pub enum InputError {
    /// A field the policy's world needs is missing.
    #[error("a {world} needs `{field}` in its input")]
    Missing {
        /// The world the input is for.
        world: World,
        /// The field missing from the input.
        field: &'static str,
    },
    /// A field of another world is given.
    #[error("`{field}` is input for another world than {world}")]
    Foreign {
        /// The policy's world.
        world: World,
        /// The field of another world.
        field: &'static str,
    },
    /// An answer is to be recorded, but the input's name does not say where.
    #[error(
        "{0}: to record its answer, name the input NAME.input.json (or .yaml): the answer goes to NAME.expected.json"
    )]
    Unnamed(std::path::PathBuf),
}

/// Where the expected answer of input `NAME.input.json` (or `.yaml`, `.yml`)
/// is kept: `NAME.expected.json` beside it.
///
/// # Errors
/// The input is not named that way.
pub fn expected_path(input: &std::path::Path) -> Result<std::path::PathBuf, InputError> {
    let name = input.file_name().and_then(|n| n.to_str()).unwrap_or("");
    [".input.json", ".input.yaml", ".input.yml"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .filter(|stem| !stem.is_empty())
        .map(|stem| input.with_file_name(format!("{stem}.expected.json")))
        .ok_or_else(|| InputError::Unnamed(input.to_owned()))
}

impl Input {
    /// Checks that the input holds exactly the fields of `world`'s call.
    fn fits(&self, world: World) -> Result<(), InputError> {
        let given = [
            ("snapshot", self.snapshot.is_some(), World::EvictionStrategy),
            (
                "top_victims",
                self.top_victims.is_some(),
                World::EvictionStrategy,
            ),
            (
                "strategies",
                self.strategies.is_some(),
                World::CandidateSorter,
            ),
            (
                "candidates",
                self.candidates.is_some(),
                World::CandidateSorter,
            ),
            ("layers", self.layers.is_some(), World::ConfigMerger),
        ];
        if let Some((field, ..)) = given.iter().find(|(_, set, w)| *set && *w != world) {
            return Err(InputError::Foreign { world, field });
        }
        let needed: &[&'static str] = match world {
            World::EvictionStrategy => &["snapshot"],
            World::CandidateSorter => &["strategies", "candidates"],
            World::ConfigMerger => &["layers"],
        };
        let missing = needed
            .iter()
            .find(|field| given.iter().any(|(f, set, _)| f == *field && !set));
        match missing {
            Some(field) => Err(InputError::Missing { world, field }),
            None => Ok(()),
        }
    }
}

/// Calls `policy` on `input`, with `config` as the policy's own config.
///
/// # Errors
/// The input does not fit the policy's world.
pub fn call(policy: &Policy, input: Input, config: &str) -> Result<Answer, InputError> {
    input.fits(policy.world())?;
    let answer = if let Some(strategy) = policy.as_strategy() {
        let node = input.snapshot.expect("checked by fits");
        let mut snapshot = Snapshot {
            now_ms: node.now_ms,
            signals: node.signals,
            pods: node.pods,
            last_met: node.last_met,
            config: config.to_owned(),
            state: node.state,
        };
        match input.top_victims {
            Some(top) => json(strategy.top_victims(&mut snapshot, &top.scope, top.n)),
            None => json(strategy.evaluate(&mut snapshot)),
        }
    } else if let Some(sorter) = policy.as_sorter() {
        let strategies = input.strategies.expect("checked by fits");
        let mut candidates = input.candidates.expect("checked by fits");
        json(sorter.sort(&strategies, &mut candidates, config))
    } else if let Some(merger) = policy.as_merger() {
        let layers: Vec<Layer> = input
            .layers
            .expect("checked by fits")
            .into_iter()
            .map(|layer| Layer {
                source: layer.source,
                json: match layer.json {
                    serde_json::Value::String(text) => text,
                    value => value.to_string(),
                },
            })
            .collect();
        json(merger.merge(&layers))
    } else {
        unreachable!("every policy has one of the three worlds")
    };
    Ok(answer)
}

/// An outcome as data.
fn json<T: Serialize, E: Serialize>(outcome: Result<Result<T, E>, Fault>) -> Answer {
    match outcome {
        Ok(Ok(answer)) => Answer::Answer(serde_json::to_value(answer).expect("answers serialise")),
        Ok(Err(declined)) => {
            Answer::Declined(serde_json::to_value(declined).expect("answers serialise"))
        }
        Err(fault) => Answer::Fault(crate::base::report::Chain(&fault).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn an_answer_is_recorded_beside_its_input() {
        let path = |p: &str| expected_path(Path::new(p)).map_err(|e| e.to_string());
        assert_eq!(
            path("test/sort.input.json"),
            Ok("test/sort.expected.json".into())
        );
        assert_eq!(path("ties.input.yaml"), Ok("ties.expected.json".into()));
        assert!(
            path("test/sort.json")
                .unwrap_err()
                .contains("NAME.input.json")
        );
        assert!(path(".input.json").is_err());
    }
}
