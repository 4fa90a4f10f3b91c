//! The README says what the code does: its list of the agent's flags, of
//! the RBAC the agent needs and of the built-in policies are held equal to
//! the binary's `--help`, `deploy/rbac.yaml` and `policy check --builtin`.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;

fn read(path: &str) -> String {
    let path = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The README's text from the line starting with `from` to the next
/// blank line.
fn paragraph<'a>(readme: &'a str, from: &str) -> &'a str {
    let start = (readme.find(&format!("\n{from}")))
        .unwrap_or_else(|| panic!("README.md has no paragraph starting {from:?}"));
    let rest = &readme[start + 1..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

fn stdout(args: &[&str]) -> String {
    let out = super::vigil().args(args).output().unwrap();
    assert!(out.status.success(), "vigil {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_readme_lists_every_flag_of_the_agent_and_no_other() {
    let help = stdout(&["agent", "--help"]);
    let flags = |text: &str| -> BTreeSet<String> {
        (text.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ','))
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| {
                w.trim_end_matches(|c: char| !c.is_alphanumeric())
                    .to_owned()
            })
            .collect()
    };
    let mut code = flags(&help);
    code.remove("--help");
    let readme = read("README.md");
    let block = paragraph(&readme, "vigil agent --node-name");
    assert_eq!(flags(block), code, "README.md's `vigil agent` block");
}

/// One rule of a (Cluster)Role, in the README's words: `pods`
/// list/watch/delete; `events` (events.k8s.io) create/patch; `secrets` get
/// (only `vigil-registry`).
fn words(rule: &Value) -> String {
    let list = |key: &str, sep: &str, quote: bool| -> String {
        let items = rule[key].as_array().into_iter().flatten();
        let items = items.map(|v| v.as_str().unwrap());
        let items: Vec<String> = items
            .map(|s| {
                if quote {
                    format!("`{s}`")
                } else {
                    s.to_owned()
                }
            })
            .collect();
        items.join(sep)
    };
    let mut text = list("resources", ", ", true);
    let group = list("apiGroups", ", ", false);
    if !group.is_empty() {
        text += &format!(" ({group})");
    }
    text += &format!(" {}", list("verbs", "/", false));
    let names = list("resourceNames", ", ", true);
    if !names.is_empty() {
        text += &format!(" (only {names})");
    }
    text
}

#[test]
fn the_readme_lists_exactly_the_rbac_of_deploy() {
    let rbac = read("deploy/rbac.yaml");
    let roles: Vec<Value> = serde_norway::Deserializer::from_str(&rbac)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect();
    let rules = |kind: &str| -> String {
        let role = roles.iter().find(|r| r["kind"] == kind).unwrap();
        let rules = role["rules"].as_array().unwrap();
        rules.iter().map(words).collect::<Vec<_>>().join("; ")
    };
    let wanted = format!(
        "RBAC it needs (exactly `deploy/rbac.yaml`; a test holds this list to it): \
         cluster-wide (ClusterRole `vigil`): {}; in vigil's namespace (Role `vigil`): {}.",
        rules("ClusterRole"),
        rules("Role")
    );
    let readme = read("README.md");
    let written = paragraph(&readme, "RBAC it needs").replace('\n', " ");
    assert_eq!(written, wanted, "README.md's RBAC paragraph");
}

#[test]
fn the_readme_and_the_cost_model_count_the_built_ins_the_binary_embeds() {
    let checked = stdout(&["policy", "check", "--builtin"]);
    let names: Vec<String> = (checked.lines())
        .filter_map(|l| l.strip_prefix("builtin:")?.strip_suffix(": ok"))
        .map(|name| format!("`{name}`"))
        .collect();
    assert!(names.len() >= 6, "{checked}");
    let readme = read("README.md");
    let listed = paragraph(&readme, "The built-in policies").replace('\n', " ");
    let wanted = format!(
        "The built-in policies, compiled from `policies/` and embedded in the binary: {}.",
        names.join(", ")
    );
    assert_eq!(listed, wanted, "README.md's list of the built-ins");
    let guide = read("docs/operating.md");
    let counted = format!("the {} built-ins", names.len());
    assert!(
        guide.replace('\n', " ").contains(&counted),
        "docs/operating.md's cost model must count {counted}"
    );
}
