//! `vigil policy test`: one export called on input given as data; the
//! answer printed, or recorded beside the input for review.

use crate::authoring::replay::{self, Answer, Input};
use crate::base::policy_name::PolicyName;
use crate::cli::args::CacheArgs;
use crate::policy::artifacts::files::{DEFAULT_MAX_POLICY_BYTES, read_policy};
use crate::policy::lifecycle::builtin::builtin;
use crate::policy::{Host, Origin};
use anyhow::{Context, bail};
use std::path::PathBuf;

/// The largest `policy test` input read: far more than a node's snapshot.
const MAX_INPUT_BYTES: u64 = 16 << 20;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct TestArgs {
    /// The component file, or `builtin:NAME`.
    file: String,
    /// The input: a YAML or JSON file.
    #[arg(long)]
    input: PathBuf,
    /// The policy's own config, as JSON (what `policies.NAME.config` holds).
    #[arg(long, default_value = "{}")]
    config: String,
    /// Write the answer to the expected file beside the input
    /// (`NAME.input.json` → `NAME.expected.json`), for review, instead
    /// of printing it.
    #[arg(long)]
    record: bool,
    #[command(flatten)]
    cache: CacheArgs,
}

impl TestArgs {
    /// `vigil policy test`: the call's answer on stdout, or in the expected file
    /// when recording; a fault is an error.
    pub(super) fn execute(self) -> anyhow::Result<()> {
        let (file, input_path, config) = (
            self.file.as_str(),
            self.input.as_path(),
            self.config.as_str(),
        );
        serde_json::from_str::<serde_json::Value>(config)
            .with_context(|| format!("--config is not JSON: {config}"))?;
        let expected = self
            .record
            .then(|| replay::expected_path(input_path))
            .transpose()?;
        let text = crate::base::fsutil::read_text(input_path, MAX_INPUT_BYTES)
            .with_context(|| format!("cannot read {}", input_path.display()))?;
        let input: Input = serde_norway::from_str(&text)
            .with_context(|| format!("{} is not a policy test input", input_path.display()))?;
        let host = Host::new(self.cache.dir())?;
        let limits = crate::policy::Limits::default();
        let policy = match file.strip_prefix("builtin:") {
            Some(name) => {
                let bytes = builtin(name)
                    .with_context(|| format!("no built-in policy is called {name}"))?;
                host.load(name, bytes, Origin::Builtin, limits)?
            }
            None => {
                let path = std::path::Path::new(file);
                let bytes = read_policy(path, DEFAULT_MAX_POLICY_BYTES)?;
                host.load(
                    PolicyName::of_path(path)?.as_str(),
                    bytes,
                    Origin::File(path.into()),
                    limits,
                )
                .with_context(|| format!("{file} does not load"))?
            }
        };
        let answer = replay::call(&policy, input, config)?;
        let text = serde_json::to_string_pretty(&answer)? + "\n";
        match &expected {
            Some(path) => {
                crate::base::fsutil::write_atomic(path, text.as_bytes())
                    .with_context(|| format!("cannot write {}", path.display()))?;
                println!("recorded {}", path.display());
            }
            None => print!("{text}"),
        }
        if let Answer::Fault(fault) = answer {
            bail!("{file} faulted: {fault}");
        }
        Ok(())
    }
}
