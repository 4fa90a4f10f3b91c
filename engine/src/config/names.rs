//! Policy names a config refers to that no loaded policy has: a misspelt
//! name would otherwise configure nothing, silently. Each comes with the
//! nearest loaded name, when one is close enough to be the likely intent.

use std::fmt;

/// A policy name the config uses that is not loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownPolicy {
    /// Where the config names it: `policies.NAME` or `sorter`.
    pub field: String,
    /// The policy name the config uses.
    pub name: String,
    /// The loaded name it most likely meant.
    pub nearest: Option<String>,
}

impl fmt::Display for UnknownPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "config field {} names policy {:?}, which is not loaded",
            self.field, self.name
        )?;
        match &self.nearest {
            Some(nearest) => write!(f, "; did you mean {nearest:?}?"),
            None => Ok(()),
        }
    }
}

/// The policies a config names (its `policies` keys, and its `sorter`) that
/// are not among `loaded`.
pub(crate) fn unknown_policies<'a, S: AsRef<str>>(
    policies: impl IntoIterator<Item = &'a String>,
    sorter: &'a String,
    loaded: &[S],
) -> Vec<UnknownPolicy> {
    let is_loaded = |name: &str| loaded.iter().any(|l| l.as_ref() == name);
    let named = policies
        .into_iter()
        .map(|name| (format!("policies.{name}"), name))
        .chain([("sorter".to_owned(), sorter)]);
    named
        .filter(|(_, name)| !is_loaded(name))
        .map(|(field, name)| UnknownPolicy {
            field,
            name: name.clone(),
            nearest: nearest(name, loaded),
        })
        .collect()
}

/// The loaded name closest to `name` by edit distance, if it is within a
/// third of the name's length (at least 2): a slip, not another name.
fn nearest<S: AsRef<str>>(name: &str, loaded: &[S]) -> Option<String> {
    let limit = (name.chars().count() / 3).max(2);
    loaded
        .iter()
        .map(|l| (distance(name, l.as_ref()), l.as_ref()))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, l)| l.to_owned())
}

/// Levenshtein distance between `a` and `b`, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::VigilConfig;

    const LOADED: [&str; 12] = [
        "default-sorter",
        "memory-pressure",
        "disk-pressure",
        "pid-pressure",
        "psi-pressure",
        "rss-overuse",
        "numa-pressure",
        "system-memory-pressure",
        "system-cpu-pressure",
        "rootfs-pressure",
        "reclaimed-resources",
        "js-sorter",
    ];

    #[test]
    fn distances_count_edits() {
        assert_eq!(distance("memory-pressure", "memory-pressure"), 0);
        assert_eq!(distance("memory-presure", "memory-pressure"), 1);
        assert_eq!(distance("memroy-pressure", "memory-pressure"), 2);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("café", "cafe"), 1);
    }

    #[test]
    fn a_misspelt_name_is_reported_with_what_it_likely_meant() {
        let config: VigilConfig = serde_json::from_value(serde_json::json!({
            "sorter": "js-sortr",
            "policies": {
                "memory-presure": {"dryRun": true},
                "disk-pressure": {"enabled": false},
                "my-own-thing": {},
            }
        }))
        .unwrap();
        let unknown = unknown_policies(config.policies.keys(), &config.sorter, &LOADED);
        let shown: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                r#"config field policies.memory-presure names policy "memory-presure", which is not loaded; did you mean "memory-pressure"?"#,
                r#"config field policies.my-own-thing names policy "my-own-thing", which is not loaded"#,
                r#"config field sorter names policy "js-sortr", which is not loaded; did you mean "js-sorter"?"#,
            ]
        );
        let defaults = VigilConfig::default();
        assert!(unknown_policies(defaults.policies.keys(), &defaults.sorter, &LOADED).is_empty());
    }
}
