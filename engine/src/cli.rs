//! The `vigil` command line. `main.rs` only calls [`run`].

use crate::clock::SystemClock;
use crate::policy::builtin::BUILTINS;
use crate::policy::check::{check_bytes, check_file};
use crate::policy::reload::Reloader;
use crate::policy::{Host, LimitsTable, Registry, Source};
use crate::report::Chain;
use crate::simulate::{RunOptions, Scenario, output, plot};
use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;

/// vigil: a node agent that evicts pods under pressure, with decisions made by WebAssembly policies.
#[derive(Debug, Parser)]
#[command(name = "vigil", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node agent: serve the policies and hot-reload them.
    Agent(AgentArgs),
    /// Run a scenario through the real eviction manager and policies, on virtual time.
    Simulate(SimulateArgs),
    /// Work with policy components.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Debug, clap::Args)]
struct SimulateArgs {
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
    /// Keep precompiled components here, so a JS or Python policy compiles once, not every run.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Output {
    /// A readable timeline and summary.
    Text,
    /// The whole simulation as JSON.
    Json,
}

#[derive(Debug, clap::Args)]
struct AgentArgs {
    /// Directory of policy components (`NAME.wasm`), watched for changes.
    #[arg(long, default_value = "/etc/vigil/policies")]
    policies_dir: PathBuf,
    /// Directory for state that survives restarts (last-known-good policies, artifact cache).
    #[arg(long, default_value = "/var/lib/vigil")]
    state_dir: PathBuf,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Validate components against the vigil:policy worlds and describe them.
    Check {
        /// Component files to check.
        files: Vec<PathBuf>,
        /// Also check the policies built into this binary.
        #[arg(long)]
        builtin: bool,
    },
}

/// Runs the command line.
///
/// # Errors
/// Whatever the command failed with; the caller prints it and exits non-zero.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Agent(args) => agent(args).await,
        Command::Simulate(args) => simulate(args).await,
        Command::Policy(PolicyCommand::Check { files, builtin }) => check(&files, builtin),
    }
}

fn check(files: &[PathBuf], builtin: bool) -> anyhow::Result<()> {
    if files.is_empty() && !builtin {
        bail!("nothing to check: name component files, or pass --builtin");
    }
    let host = Host::new(None)?;
    let mut failures = 0;
    let builtins = BUILTINS.iter().filter(|_| builtin).map(|(name, bytes)| {
        let origin = format!("builtin:{name}");
        let result = check_bytes(&host, origin.clone(), name, *bytes, Source::Builtin);
        (origin, result)
    });
    let files = files
        .iter()
        .map(|path| (path.display().to_string(), check_file(&host, path)));
    for (origin, result) in builtins.chain(files) {
        match result {
            Ok(report) => println!("{report}"),
            Err(error) => {
                failures += 1;
                println!("{origin}: INVALID: {}", Chain(&error));
            }
        }
    }
    if failures > 0 {
        bail!("{failures} component(s) failed the check");
    }
    Ok(())
}

async fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let scenario = Scenario::load(&args.scenario)?;
    let base = args.scenario.parent().unwrap_or(std::path::Path::new("."));
    let options = RunOptions {
        policies_dir: args.policies_dir,
        cache_dir: args.cache_dir,
    };
    let simulation = crate::simulate::run(&scenario, base, &options)
        .await
        .with_context(|| format!("simulating {}", args.scenario.display()))?;
    match args.output {
        Output::Text => print!("{}", output::render(&simulation)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&simulation)?),
    }
    if let Some(path) = &args.plot {
        plot::draw(&simulation, path)?;
        eprintln!("chart written to {}", path.display());
    }
    Ok(())
}

async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let host = Arc::new(Host::new(Some(args.state_dir.join("cache")))?);
    let registry = Arc::new(Registry::new(
        host,
        Arc::new(SystemClock),
        LimitsTable::default(),
        Some(args.state_dir),
    )?);
    let reloader = Reloader::new(Arc::clone(&registry), args.policies_dir.clone());
    tracing::info!(policies_dir = %args.policies_dir.display(), "vigil agent started");
    reloader
        .run(shutdown_signal(), None)
        .await
        .with_context(|| format!("policy reloader for {}", args.policies_dir.display()))?;
    tracing::info!("vigil agent stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("cannot install the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
