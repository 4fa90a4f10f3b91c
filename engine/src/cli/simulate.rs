//! `vigil simulate`: a scenario on virtual time, printed or drawn.

use super::args::CacheArgs;
use crate::simulate::shadow::ShadowFile;
use crate::simulate::{RunOptions, Scenario, output, plot};
use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(super) struct SimulateArgs {
    /// The scenario file (YAML); see examples/scenarios/.
    scenario: PathBuf,
    /// How to print the result.
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    /// Also draw the signals against their thresholds, with evictions marked, to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Load policies (`NAME.wasm`, overriding the built-in of that name) from this
    /// directory instead of the scenario's `policiesDir`.
    #[arg(long, value_name = "DIR")]
    policies_dir: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
    /// With `--output json`, give every step the node as the strategies saw
    /// it (`snapshot`), the input `vigil policy test` takes.
    #[arg(long)]
    snapshots: bool,
    /// Run the component FILE in shadow of the serving policy NAME (a
    /// strategy, a sorter or a merger): asked what NAME is asked, never
    /// acted on; where it would have decided otherwise is printed.
    /// Repeatable, one file per policy.
    #[arg(long, value_name = "NAME=FILE")]
    shadow: Vec<ShadowFile>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Output {
    /// A readable timeline and summary.
    Text,
    /// The whole simulation as JSON.
    Json,
}

impl SimulateArgs {
    pub(super) async fn execute(self) -> anyhow::Result<()> {
        let scenario = Scenario::load(&self.scenario)?;
        let base = self.scenario.parent().unwrap_or(std::path::Path::new("."));
        let options = RunOptions {
            policies_dir: self.policies_dir,
            cache_dir: self.cache.dir(),
            snapshots: self.snapshots,
            shadows: self.shadow,
        };
        let simulation = crate::simulate::run(&scenario, base, &options)
            .await
            .with_context(|| format!("simulating {}", self.scenario.display()))?;
        match self.output {
            Output::Text => print!("{}", output::render(&simulation)),
            Output::Json => println!("{}", serde_json::to_string_pretty(&simulation)?),
        }
        if let Some(path) = &self.plot {
            plot::draw(&simulation, path)?;
            eprintln!("chart written to {}", path.display());
        }
        Ok(())
    }
}
