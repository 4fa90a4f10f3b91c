//! The objects, their resourceVersions and the change log watches replay.
//!
//! Objects are plain JSON, keyed by resource (`pods`, `nodes`,
//! `poddisruptionbudgets`, `events`), namespace and name. Every write takes
//! the next resourceVersion and appends to the log; a compaction forgets the
//! log up to now, so a watch resuming from before it gets `410 Gone`.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Where an object lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The resource, e.g. `pods`.
    pub resource: String,
    /// The namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl Key {
    /// The key of `resource` `namespace`/`name`.
    pub fn new(resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// One change, as a watch sends it.
#[derive(Debug, Clone)]
pub struct Change {
    /// The resourceVersion it made.
    pub rv: u64,
    /// Which object.
    pub key: Key,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object after the change (before it, for a deletion).
    pub object: Value,
}

/// Objects, the current resourceVersion and the change log.
#[derive(Debug, Default)]
pub struct Store {
    /// The last resourceVersion given out.
    pub rv: u64,
    /// Every object.
    pub objects: BTreeMap<Key, Value>,
    /// Changes after `compacted`.
    pub log: Vec<Change>,
    /// Changes up to this resourceVersion are forgotten.
    pub compacted: u64,
}

impl Store {
    /// Creates or replaces the object at `key` (its metadata gets name,
    /// namespace, a uid if missing and the new resourceVersion).
    pub fn put(&mut self, key: Key, mut object: Value) -> Value {
        self.rv += 1;
        let meta = object
            .as_object_mut()
            .expect("objects are JSON objects")
            .entry("metadata")
            .or_insert_with(|| json!({}));
        meta["name"] = json!(key.name);
        if !key.namespace.is_empty() {
            meta["namespace"] = json!(key.namespace);
        }
        if meta.get("uid").is_none() {
            meta["uid"] = json!(format!(
                "uid-{}-{}-{}",
                key.resource, key.namespace, key.name
            ));
        }
        meta["resourceVersion"] = json!(self.rv.to_string());
        // The generation counts changes of the spec, as the API server's does.
        if let Some(spec) = object.get("spec").cloned() {
            let before = self.objects.get(&key);
            let generation = match before {
                Some(old) if old.get("spec") == Some(&spec) => {
                    old["metadata"]["generation"].as_u64().unwrap_or(1)
                }
                Some(old) => old["metadata"]["generation"].as_u64().unwrap_or(1) + 1,
                None => 1,
            };
            object["metadata"]["generation"] = json!(generation);
        }
        let kind = if self.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.objects.insert(key.clone(), object.clone());
        self.log.push(Change {
            rv: self.rv,
            key,
            kind,
            object: object.clone(),
        });
        object
    }

    /// Removes the object at `key`, if any.
    pub fn delete(&mut self, key: &Key) -> Option<Value> {
        let mut object = self.objects.remove(key)?;
        self.rv += 1;
        object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.log.push(Change {
            rv: self.rv,
            key: key.clone(),
            kind: "DELETED",
            object: object.clone(),
        });
        Some(object)
    }

    /// Forgets the change log: watches from before now get `410 Gone`.
    pub fn compact(&mut self) {
        self.compacted = self.rv;
        self.log.clear();
    }

    /// The objects of `resource` in `namespace` (every namespace if none).
    pub fn list<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a Key, &'a Value)> + 'a {
        self.objects.iter().filter(move |(k, _)| {
            k.resource == resource && namespace.is_none_or(|ns| ns == k.namespace)
        })
    }
}

/// A field selector (`a.b=v,c!=w`) or label selector (`k=v,k!=w,k`), as a
/// list of (path, wanted value or none for "exists", negated).
#[derive(Debug, Clone, Default)]
pub struct Selector(Vec<(Vec<String>, Option<String>, bool)>);

impl Selector {
    /// Parses a field selector: each term names a dotted path in the object.
    pub fn fields(text: &str) -> Self {
        Self::parse(text, |key| key.split('.').map(str::to_owned).collect())
    }

    /// Parses a label selector: each term names a label.
    pub fn labels(text: &str) -> Self {
        Self::parse(text, |key| {
            vec!["metadata".into(), "labels".into(), key.to_owned()]
        })
    }

    fn parse(text: &str, path: impl Fn(&str) -> Vec<String>) -> Self {
        let terms = text.split(',').filter(|t| !t.is_empty()).map(|term| {
            if let Some((key, value)) = term.split_once("!=") {
                (path(key), Some(value.to_owned()), true)
            } else if let Some((key, value)) = term.split_once("==").or(term.split_once('=')) {
                (path(key), Some(value.to_owned()), false)
            } else {
                (path(term), None, false)
            }
        });
        Self(terms.collect())
    }

    /// Whether `object` matches every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, wanted, negated)| {
            let found = path
                .iter()
                .try_fold(object, |v, key| v.get(key))
                .and_then(Value::as_str);
            let hit = match wanted {
                Some(wanted) => found.unwrap_or("") == wanted,
                None => found.is_some(),
            };
            hit != *negated
        })
    }
}

/// Applies `patch` to `target` as an RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_fields_and_labels() {
        let pod = json!({"metadata": {"name": "a", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}});
        assert!(Selector::fields("spec.nodeName=n1").matches(&pod));
        assert!(!Selector::fields("spec.nodeName=n2").matches(&pod));
        assert!(Selector::fields("spec.nodeName!=n2,metadata.name=a").matches(&pod));
        assert!(Selector::labels("app=web").matches(&pod));
        assert!(Selector::labels("app").matches(&pod));
        assert!(!Selector::labels("tier").matches(&pod));
        assert!(Selector::labels("").matches(&pod));
    }
}
