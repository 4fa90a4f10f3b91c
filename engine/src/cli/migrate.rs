//! `vigil migrate katalyst`: katalyst's eviction configuration as a
//! `VigilConfig` (see `config::katalyst`), printed as YAML; what does not
//! carry over is told on stderr.

use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;

/// What to migrate from.
#[derive(Debug, Subcommand)]
pub(super) enum MigrateCommand {
    /// katalyst's eviction configuration: an `AdminQoSConfiguration` (or an older
    /// `EvictionConfiguration`) and the agent's eviction flags, as the `VigilConfig` that
    /// enables the same strategies with the same thresholds.
    Katalyst(KatalystArgs),
}

/// `vigil migrate katalyst FILE`.
#[derive(Debug, Args)]
pub(super) struct KatalystArgs {
    /// The YAML file of katalyst's objects (`kubectl get aqc NAME -o yaml`; several
    /// documents allowed, others ignored).
    file: PathBuf,
    /// A file of the katalyst agent's flags (`--name=value`, separated by white space),
    /// read before the objects, which override them as katalyst's dynamic config does.
    #[arg(long)]
    flags: Option<PathBuf>,
    /// The name of the `VigilConfig` written.
    #[arg(long, default_value = "from-katalyst")]
    name: String,
}

impl MigrateCommand {
    pub(super) fn execute(self) -> anyhow::Result<()> {
        let Self::Katalyst(args) = self;
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
        };
        let yaml = read(&args.file)?;
        let flags = args
            .flags
            .as_ref()
            .map(read)
            .transpose()?
            .unwrap_or_default();
        let migration = crate::config::katalyst::migrate(&yaml, &flags, &args.name)
            .with_context(|| format!("cannot migrate {}", args.file.display()))?;
        for note in &migration.notes {
            eprintln!("note: {note}");
        }
        print!("{}", serde_norway::to_string(&migration.object)?);
        Ok(())
    }
}
