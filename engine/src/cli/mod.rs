//! The `vigil` command line: the command tree and its dispatch. Each command
//! is a file here with its arguments and an `execute` that calls the room the
//! work belongs to and prints what it answers. `main.rs` only calls [`run`].

mod agent;
mod args;
mod cleanup;
mod fleet;
mod migrate;
mod mode;
mod own_state;
mod policy;
mod schemas;
mod simulate;

use clap::{Parser, Subcommand};

/// vigil: a node agent that evicts pods under pressure, with decisions made by WebAssembly policies.
#[derive(Debug, Parser)]
#[command(name = "vigil", version = crate::base::build::VERSION)]
pub struct Cli {
    /// How to write logs (to stderr).
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Cli {
    /// How much to log when `RUST_LOG` does not say: the agent logs what it
    /// does; `simulate` shows everything in its output, so it logs only
    /// errors; the other commands log warnings.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Agent(_) => "info",
            Command::Simulate(_) => "error",
            _ => "warn",
        }
    }

    /// Whether this command is the agent, which serves until it is stopped,
    /// rather than one that prints and ends: only those may be ended by their
    /// reader going away (`vigil … | head`).
    pub fn is_daemon(&self) -> bool {
        matches!(self.command, Command::Agent(_))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node agent: watch this node's pods, decide with the policies
    /// (hot-reloaded), evict through the Eviction API, report on the Node.
    Agent(Box<agent::AgentArgs>),
    /// Run a scenario through the real eviction manager and policies, on virtual time.
    Simulate(simulate::SimulateArgs),
    /// Work with policy components.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// How far a policy has rolled out: nodes per version, stage and state, the agreement
    /// of its version in shadow, the nodes where it failed and why; with `--config`, the
    /// config's rollout. Also `kubectl vigil status POLICY`, with this binary on the PATH
    /// as `kubectl-vigil`.
    Status(fleet::StatusArgs),
    /// From observing to acting: every agent the shipped DaemonSet starts observes
    /// (`--observe-first`) until this writes `VigilConfig/vigil-enforce`, `dryRun: false` on
    /// `--percent` of the nodes. Also `kubectl vigil enforce --percent N`.
    Enforce(mode::EnforceArgs),
    /// The fleet's brake: every agent stops evicting and tainting at once (no spread, no
    /// trial), by the `VigilConfig` `vigil-pause`. Also `kubectl vigil pause`.
    Pause(mode::BrakeArgs),
    /// Lift `vigil pause`: deletes `VigilConfig/vigil-pause`. Also `kubectl vigil resume`.
    Resume(mode::BrakeArgs),
    /// This binary's build and the agents' builds across the fleet (`--client`: this
    /// binary's only). Also `kubectl vigil version`.
    Version(fleet::VersionArgs),
    /// Where the vigil pod of a node runs, its readiness, restarts and image. Also
    /// `kubectl vigil where NODE`.
    Where(fleet::WhereArgs),
    /// Why a pod was evicted: each eviction call about it the nodes still keep, with the
    /// strategy and its version, the threshold that held, the sorter, its version and the
    /// pod's rank. Also `kubectl vigil explain NAMESPACE/NAME`.
    Explain(fleet::ExplainArgs),
    /// Remove what vigil leaves behind when it is uninstalled (deploy/cleanup/ runs it).
    #[command(subcommand)]
    Cleanup(cleanup::CleanupCommand),
    /// Write vigil's config from another eviction engine's (`vigil migrate katalyst FILE`).
    #[command(subcommand)]
    Migrate(migrate::MigrateCommand),
    /// Give the state directory, and everything in it, to the agent's user (the
    /// DaemonSet's init container: the only part of vigil that runs as root).
    OwnState(own_state::OwnStateArgs),
    /// Print the custom resource definitions vigil reads (YAML), for `kubectl apply -f -`.
    Crd,
    /// Print the JSON Schema of vigil's config, for editors and CI checks of config files.
    ConfigSchema,
    /// Print the JSON Schema of `vigil simulate`'s scenario files, for editors.
    ScenarioSchema,
}

/// Runs the command line.
///
/// # Errors
/// Whatever the command failed with; the caller prints it and exits non-zero.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Agent(args) => args.execute().await,
        Command::Simulate(args) => args.execute().await,
        Command::Policy(command) => command.execute().await,
        Command::Status(args) => args.execute().await,
        Command::Enforce(args) => args.execute().await,
        Command::Pause(args) => args.pause().await,
        Command::Resume(args) => args.resume().await,
        Command::Version(args) => args.execute().await,
        Command::Where(args) => args.execute().await,
        Command::Explain(args) => args.execute().await,
        Command::Cleanup(command) => command.execute().await,
        Command::Migrate(command) => command.execute(),
        Command::OwnState(args) => args.execute(),
        Command::Crd => schemas::crd(),
        Command::ConfigSchema => schemas::config(),
        Command::ScenarioSchema => schemas::scenario(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pod of the DaemonSet in `deploy/FILE`.
    fn daemonset_pod(file: &str) -> serde_json::Value {
        let path = format!("{}/../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let daemonset: serde_json::Value = serde_norway::from_str(&text).unwrap();
        daemonset["spec"]["template"]["spec"].clone()
    }

    /// `vigil ARGS…` parsed, `args` being a container's JSON `args`.
    fn parse(args: &serde_json::Value) -> Cli {
        let args: Vec<String> = serde_json::from_value(args.clone()).unwrap();
        let argv = std::iter::once("vigil".to_owned()).chain(args);
        Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `vigil enforce` takes a share of the nodes, 0 to 100, and nothing else.
    #[test]
    fn enforce_refuses_a_share_outside_0_to_100() {
        for ok in ["0", "100"] {
            Cli::try_parse_from(["vigil", "enforce", "--percent", ok]).unwrap();
        }
        // (`-1` reads as a flag of its own, refused as such.)
        assert!(Cli::try_parse_from(["vigil", "enforce", "--percent", "-1"]).is_err());
        for bad in ["101", "ten"] {
            let error = Cli::try_parse_from(["vigil", "enforce", "--percent", bad]).unwrap_err();
            assert_eq!(
                error.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad}"
            );
        }
        let missing = Cli::try_parse_from(["vigil", "enforce"]).unwrap_err();
        assert_eq!(
            missing.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
    }

    /// Only the init container runs as root, and it gives the state
    /// directory to the user the agent (and the cleanup) then runs as.
    #[test]
    fn the_init_container_gives_the_state_directory_to_the_user_that_runs() {
        for file in ["daemonset.yaml", "cleanup/state.yaml"] {
            let pod = daemonset_pod(file);
            let init = &pod["initContainers"][0];
            let Command::OwnState(own) = parse(&init["args"]).command else {
                panic!("{file}: the init container does not run own-state");
            };
            let container = &pod["containers"][0];
            let context = &container["securityContext"];
            assert_eq!(context["runAsNonRoot"], true, "{file}");
            let runs_as = (
                context["runAsUser"].as_u64(),
                context["runAsGroup"].as_u64(),
            );
            assert_eq!(
                runs_as,
                (Some(own.user.0.into()), Some(own.user.1.into())),
                "{file}"
            );
            let mounted = |c: &serde_json::Value| {
                c["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["name"] == "state")
                    .map(|m| m["mountPath"].as_str().unwrap().to_owned())
            };
            assert_eq!(
                mounted(init),
                Some(own.state_dir.display().to_string()),
                "{file}"
            );
            assert_eq!(mounted(container), mounted(init), "{file}");
            let added = &init["securityContext"]["capabilities"]["add"];
            assert_eq!(
                added,
                &serde_json::json!(["CHOWN", "DAC_READ_SEARCH"]),
                "{file}"
            );
        }
    }

    #[test]
    fn the_daemonset_passes_only_flags_and_variables_the_agent_accepts() {
        use clap::CommandFactory;
        let container = daemonset_pod("daemonset.yaml")["containers"][0].clone();
        let cli = parse(&container["args"]);
        assert!(matches!(cli.command, Command::Agent(_)), "{cli:?}");

        let command = Cli::command();
        let agent = command.find_subcommand("agent").unwrap();
        let accepted: Vec<String> = agent
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        for env in container["env"].as_array().unwrap() {
            let name = env["name"].as_str().unwrap();
            assert!(
                accepted.iter().any(|a| a == name),
                "{name} is not read by `vigil agent`"
            );
        }
        // The probes ask the paths the agent serves, on the port it listens on.
        let port = container["ports"][0]["containerPort"].as_u64().unwrap();
        let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
        // Dual-stack: IPv6 and IPv4 alike.
        assert!(args.contains(&format!("--metrics-addr=[::]:{port}")));
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    }
}
