//! The three worlds of the contract, the contract versions this host
//! serves, and how a component's world and version are found from its
//! exports.

use crate::policy::LoadError;
use std::fmt;

/// Version of the `vigil:policy` package this host implements.
pub const CONTRACT_VERSION: &str = "0.3.0";

/// A version of the `vigil:policy` contract this host serves: the current
/// one, and the earlier ones through adapters (see `wit/0.1.0/`,
/// `wit/0.2.0/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contract {
    /// `vigil:policy@0.1.0`: no interest is declared (every label and
    /// annotation is passed), sorter candidates name their strategy and
    /// reason, an owner's kind is a string.
    V0_1,
    /// `vigil:policy@0.2.0`: one threshold per decision, no state, no
    /// report-only level, usage values that are 0 when unread, no signals
    /// or pod facts declared.
    V0_2,
    /// `vigil:policy@0.3.0`, the current contract.
    V0_3,
}

impl Contract {
    /// Every contract served, oldest first.
    pub const ALL: [Contract; 3] = [Self::V0_1, Self::V0_2, Self::V0_3];

    /// The package version, e.g. `0.3.0`.
    pub fn version(self) -> &'static str {
        match self {
            Self::V0_1 => "0.1.0",
            Self::V0_2 => "0.2.0",
            Self::V0_3 => CONTRACT_VERSION,
        }
    }

    /// Whether the host adapts this contract to the current one.
    pub fn is_adapted(self) -> bool {
        self != Self::V0_3
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vigil:policy@{}", self.version())
    }
}

/// The kind of policy a component is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum World {
    /// `eviction-strategy`: exports `vigil:policy/strategy`.
    EvictionStrategy,
    /// `candidate-sorter`: exports `vigil:policy/sorter`.
    CandidateSorter,
    /// `config-merger`: exports `vigil:policy/merger`.
    ConfigMerger,
}

impl World {
    /// Every world.
    pub const ALL: [World; 3] = [
        Self::EvictionStrategy,
        Self::CandidateSorter,
        Self::ConfigMerger,
    ];

    /// The world's name in WIT.
    pub fn name(self) -> &'static str {
        match self {
            Self::EvictionStrategy => "eviction-strategy",
            Self::CandidateSorter => "candidate-sorter",
            Self::ConfigMerger => "config-merger",
        }
    }

    /// The interface a component of this world exports, e.g. `sorter`.
    pub fn interface(self) -> &'static str {
        match self {
            Self::EvictionStrategy => "strategy",
            Self::CandidateSorter => "sorter",
            Self::ConfigMerger => "merger",
        }
    }

    /// The fully qualified export name under `contract`, e.g.
    /// `vigil:policy/sorter@0.2.0`.
    pub fn export_name(self, contract: Contract) -> String {
        format!("vigil:policy/{}@{}", self.interface(), contract.version())
    }

    /// Finds the world, and the contract it is spoken in, from a
    /// component's export names.
    ///
    /// # Errors
    /// No policy export, several, or one of a contract version not served.
    pub fn from_exports<'a>(
        exports: impl IntoIterator<Item = &'a str>,
    ) -> Result<(Self, Contract), LoadError> {
        let exports: Vec<&str> = exports.into_iter().collect();
        let found: Vec<(World, Contract)> = Self::ALL
            .into_iter()
            .flat_map(|w| Contract::ALL.map(|c| (w, c)))
            .filter(|(w, c)| exports.contains(&w.export_name(*c).as_str()))
            .collect();
        match found.as_slice() {
            [spoken] => Ok(*spoken),
            [] => match exports.iter().find(|e| e.starts_with("vigil:policy/")) {
                Some(other) => Err(LoadError::UnsupportedVersion {
                    version: other.rsplit_once('@').map_or("?", |(_, v)| v).to_owned(),
                    found: (*other).to_owned(),
                }),
                None => Err(LoadError::NoWorld {
                    exports: list_or_none(&exports),
                }),
            },
            several => Err(LoadError::SeveralWorlds {
                exports: several
                    .iter()
                    .map(|(w, c)| w.export_name(*c))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

fn list_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_world_and_contract_from_exports() {
        let spoken =
            World::from_exports(["wasi:cli/run@0.2.0", "vigil:policy/sorter@0.3.0"]).unwrap();
        assert_eq!(spoken, (World::CandidateSorter, Contract::V0_3));
        let before = World::from_exports(["vigil:policy/merger@0.2.0"]).unwrap();
        assert_eq!(before, (World::ConfigMerger, Contract::V0_2));
        assert!(before.1.is_adapted());
        let previous = World::from_exports(["vigil:policy/strategy@0.1.0"]).unwrap();
        assert_eq!(previous, (World::EvictionStrategy, Contract::V0_1));
        assert!(previous.1.is_adapted() && !spoken.1.is_adapted());
        assert_eq!(previous.1.to_string(), "vigil:policy@0.1.0");
        assert!(matches!(
            World::from_exports(["wasi:cli/run@0.2.6"]),
            Err(LoadError::NoWorld { exports }) if exports == "wasi:cli/run@0.2.6"
        ));
        let future = World::from_exports(["vigil:policy/sorter@0.4.0"]).unwrap_err();
        assert!(matches!(
            &future,
            LoadError::UnsupportedVersion { version, found }
                if version == "0.4.0" && found == "vigil:policy/sorter@0.4.0"
        ));
        assert!(
            future.to_string().starts_with(
                "built for vigil:policy@0.4.0, this agent serves 0.1.0, 0.2.0 and 0.3.0"
            ),
            "{future}"
        );
        assert!(matches!(
            World::from_exports(["vigil:policy/sorter@0.3.0", "vigil:policy/merger@0.3.0"]),
            Err(LoadError::SeveralWorlds { .. })
        ));
        assert!(matches!(
            World::from_exports(["vigil:policy/sorter@0.1.0", "vigil:policy/sorter@0.2.0"]),
            Err(LoadError::SeveralWorlds { .. })
        ));
    }
}
