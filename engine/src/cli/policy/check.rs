//! `vigil policy check`: components loaded as the agent would, each
//! described or refused, and a config's policy names checked.

use crate::authoring::check::{Builtins, check_all};
use crate::base::report::Chain;
use crate::cli::args::CacheArgs;
use crate::config::VigilConfig;
use crate::eviction::EvictionSettings;
use crate::policy::Host;
use anyhow::{Context, bail};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct CheckArgs {
    /// Component files to check.
    files: Vec<PathBuf>,
    /// Also check the policies built into this binary.
    #[arg(long)]
    builtin: bool,
    /// A vigil config layer (a YAML or JSON file, or inline JSON starting
    /// with `{`): each canary call gets its policy's `policies.NAME.config`,
    /// and fails if the policy declines with it; config for a policy that
    /// is neither checked nor built in is an error.
    #[arg(long, value_name = "FILE|JSON")]
    config: Option<String>,
    #[command(flatten)]
    cache: CacheArgs,
}

impl CheckArgs {
    pub(super) fn execute(self) -> anyhow::Result<()> {
        if self.files.is_empty() && !self.builtin {
            bail!("nothing to check: name component files, or pass --builtin");
        }
        let host = Host::new(self.cache.dir())?;
        let settings = self.config.as_deref().map(config_layer).transpose()?;
        let builtins = if self.builtin {
            Builtins::Check
        } else {
            Builtins::Skip
        };
        let run = check_all(&host, &self.files, builtins, settings.as_ref());
        for unknown in &run.unknown {
            println!("config: INVALID: {unknown}");
        }
        for (origin, result) in &run.checked {
            match result {
                Ok(report) => match &report.declined {
                    Some(reason) if run.with_config => println!(
                        "{origin}: INVALID: declined the canary call with its config: {reason}"
                    ),
                    _ => println!("{report}"),
                },
                Err(error) => println!("{origin}: INVALID: {}", Chain(error)),
            }
        }
        match run.failures() {
            0 => Ok(()),
            failures => bail!("{failures} problem(s) found by the check"),
        }
    }
}

/// The settings of the config layer `arg` (inline JSON if it starts with
/// `{`, else a YAML or JSON file), checked against vigil's config schema.
fn config_layer(arg: &str) -> anyhow::Result<EvictionSettings> {
    let (text, origin) = if arg.trim_start().starts_with('{') {
        (arg.to_owned(), "--config".to_owned())
    } else {
        let text = std::fs::read_to_string(arg).with_context(|| format!("cannot read {arg}"))?;
        (text, arg.to_owned())
    };
    let value: serde_json::Value =
        serde_norway::from_str(&text).with_context(|| format!("{origin} is not YAML or JSON"))?;
    let problems = crate::config::schema::violations(&value);
    if !problems.is_empty() {
        bail!(
            "{origin} does not match vigil's config schema: {}",
            problems.join("; ")
        );
    }
    let config: VigilConfig = serde_json::from_value(value)
        .with_context(|| format!("{origin} is not a valid vigil config"))?;
    Ok(EvictionSettings::from(&config))
}
