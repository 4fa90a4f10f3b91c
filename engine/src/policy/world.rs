//! The three worlds of the contract, and how a component's world is found
//! from its exports.

use super::LoadError;
use std::fmt;

/// Version of the `vigil:policy` package this host implements.
pub const CONTRACT_VERSION: &str = "0.2.0";

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

    /// The interface a component of this world exports.
    fn interface(self) -> &'static str {
        match self {
            Self::EvictionStrategy => "strategy",
            Self::CandidateSorter => "sorter",
            Self::ConfigMerger => "merger",
        }
    }

    /// The fully qualified export name, e.g. `vigil:policy/sorter@0.2.0`.
    pub fn export_name(self) -> String {
        format!("vigil:policy/{}@{CONTRACT_VERSION}", self.interface())
    }

    /// Finds the world from a component's export names.
    ///
    /// # Errors
    /// No policy export, several, or one of another contract version.
    pub fn from_exports<'a>(exports: impl IntoIterator<Item = &'a str>) -> Result<Self, LoadError> {
        let exports: Vec<&str> = exports.into_iter().collect();
        let found: Vec<World> = Self::ALL
            .into_iter()
            .filter(|w| exports.contains(&w.export_name().as_str()))
            .collect();
        match found.as_slice() {
            [world] => Ok(*world),
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
                    .map(|w| w.export_name())
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
    fn finds_the_world_from_exports() {
        let world =
            World::from_exports(["wasi:cli/run@0.2.0", "vigil:policy/sorter@0.2.0"]).unwrap();
        assert_eq!(world, World::CandidateSorter);
        assert!(matches!(
            World::from_exports(["wasi:cli/run@0.2.6"]),
            Err(LoadError::NoWorld { exports }) if exports == "wasi:cli/run@0.2.6"
        ));
        let old = World::from_exports(["vigil:policy/sorter@0.1.0"]).unwrap_err();
        assert!(matches!(
            &old,
            LoadError::UnsupportedVersion { version, found }
                if version == "0.1.0" && found == "vigil:policy/sorter@0.1.0"
        ));
        assert!(
            old.to_string()
                .starts_with("built for vigil:policy@0.1.0, this agent speaks 0.2.0"),
            "{old}"
        );
        assert!(matches!(
            World::from_exports(["vigil:policy/sorter@0.2.0", "vigil:policy/merger@0.2.0"]),
            Err(LoadError::SeveralWorlds { .. })
        ));
    }
}
