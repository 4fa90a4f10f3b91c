//! A simulated fleet, to measure what vigil costs the API server: one API
//! server (a [`ControlPlane`]: the project's test server, or the upstream
//! control plane) and N real `vigil agent` processes, each with its own node
//! files, Node object and pods, taken through the phases a fleet lives
//! through — start, at rest, a `VigilConfig` change, a policy rollout from
//! a registry, the fleet paused and resumed (`vigil pause`'s layer), every
//! agent restarting (a DaemonSet rollout) and a window at rest after it, the
//! API server restarting. Each [`Phase`] holds the
//! agents' requests the server saw while it lasted and, from a server that
//! keeps metrics, its own account of them.

mod plane;
mod server_use;
mod targets;
mod upstream;

pub use plane::ControlPlane;
pub use server_use::{Sample, ServerUse};
pub use targets::phase;
pub use upstream::UpstreamPlane;

use crate::{AgentProcess, AgentUse, NodeFiles, OciRegistry, Request, cli, objects};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The agents' config: a calm node is never evicted from.
const CONFIG: &str =
    "policies:\n  memory-pressure:\n    config: {hard: 100Mi}\n  disk-pressure: {enabled: false}\n";
/// Pods per node, in two namespaces.
const PODS: usize = 4;
/// The policy rolled out from the registry.
pub const POLICY: &str = "fleet-sorter";
/// The `VigilConfig` the config phase creates.
pub const LAYER: &str = "fleet-sim";
/// The `VigilConfig` the pause phase creates, as `vigil pause` does.
pub const PAUSE: &str = "vigil-pause";
/// A bound for a phase that does not end, never a wait.
const LIMIT: Duration = Duration::from_secs(900);

/// What to simulate.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// The `vigil` binary.
    pub binary: PathBuf,
    /// How many nodes (one agent each).
    pub nodes: usize,
    /// How long the fleet is watched at rest.
    pub rest: Duration,
    /// The agents' `--config-spread`.
    pub config_spread: Duration,
    /// A policy component to publish and roll out (skipped when `None`).
    pub policy: Option<PathBuf>,
    /// Agents started, and restarted, together; each wave waits until the
    /// one before has started (a DaemonSet's rolling update). `nodes`: all
    /// at once.
    pub wave: usize,
    /// Whether the nodes start with the compiled built-ins in their
    /// artifact cache: the first node's agent starts alone, and its cache
    /// (its key, the native code and its MACs) is copied to every other
    /// node before its agent starts. Each node compiling the built-ins is
    /// that node's CPU, not the API server's: on a machine that runs a
    /// hundred nodes it only delays the start.
    pub warm_cache: bool,
    /// How long no agent may have written for a phase that changes
    /// something to end, after its condition holds: what a change leaves to
    /// write (a status object due again after `--status-interval`, 15 s)
    /// counts to the change, not to the phase after. Zero: a phase ends with
    /// its condition.
    pub quiet: Duration,
}

/// One phase: when it began, how long it lasted, what the server saw.
#[derive(Debug)]
pub struct Phase {
    /// Its name.
    pub name: &'static str,
    /// The nodes of the fleet.
    pub nodes: usize,
    /// When it began.
    pub began: Instant,
    /// How long it lasted.
    pub elapsed: Duration,
    /// The agents' requests the API server saw meanwhile.
    pub requests: Vec<Request>,
    /// The server's own account of the phase (every client's requests),
    /// from a server that keeps metrics.
    pub server: Option<ServerUse>,
    /// Watch streams open at its end (counted at rest only).
    pub open_watches: Option<usize>,
    /// Each agent's resident memory at its end, and the CPU time it used
    /// while it lasted (at rest only).
    pub agents: Vec<AgentUse>,
    /// How long until the last agent said it had done what the phase asks
    /// (pause and resume only: each agent's own gauge, read every 100 ms).
    pub reached: Option<Duration>,
}

impl Phase {
    /// The requests that are not watches.
    pub fn non_watch(&self) -> impl Iterator<Item = &Request> {
        self.requests.iter().filter(|r| !r.is_watch())
    }

    /// The requests that change something (not a GET).
    pub fn writes(&self) -> impl Iterator<Item = &Request> {
        self.requests.iter().filter(|r| r.method != "GET")
    }

    /// The LISTs.
    pub fn lists(&self) -> impl Iterator<Item = &Request> {
        self.requests.iter().filter(|r| r.is_list())
    }

    /// The watch requests (each opens a stream).
    pub fn watches(&self) -> impl Iterator<Item = &Request> {
        self.requests.iter().filter(|r| r.is_watch())
    }

    /// The writes about `node`: its Node, its status objects, its Events.
    pub fn writes_of<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Request> {
        let own = move |r: &&Request| {
            let path = r.uri.split('?').next().unwrap_or_default();
            path.contains(&format!("/{node}")) || r.body.as_ref().is_some_and(|b| mentions(b, node))
        };
        self.writes().filter(own)
    }

    /// From the first write to the last.
    pub fn write_span(&self) -> Duration {
        let times: Vec<Instant> = self.writes().map(|r| r.at).collect();
        match (times.iter().min(), times.iter().max()) {
            (Some(first), Some(last)) => *last - *first,
            _ => Duration::ZERO,
        }
    }

    /// `count` per node.
    pub fn per_node(&self, count: usize) -> f64 {
        count as f64 / self.nodes as f64
    }

    /// `count` per node per minute of the phase.
    pub fn per_node_minute(&self, count: usize) -> f64 {
        self.per_node(count) / (self.elapsed.as_secs_f64() / 60.0)
    }

    /// The requests by verb and resource (`list pods`, `patch nodes/status`).
    pub fn by_kind(&self) -> std::collections::BTreeMap<String, usize> {
        let mut kinds = std::collections::BTreeMap::new();
        for request in &self.requests {
            let kind = request.access().map_or_else(
                || request.uri.clone(),
                |a| format!("{} {}", a.verb, a.resource),
            );
            *kinds.entry(kind).or_default() += 1;
        }
        kinds
    }
}

/// Whether a write's body names `node` (an Event about it, say).
fn mentions(body: &Value, node: &str) -> bool {
    let regarding = &body["regarding"];
    regarding["kind"] == "Node" && regarding["name"] == node
}

/// One simulated node.
struct SimNode {
    name: String,
    files: NodeFiles,
    kubeconfig: String,
    agent: Option<AgentProcess>,
}

/// Where a phase began: the time, the requests seen, the server's metrics.
struct Start {
    at: Instant,
    mark: usize,
    sample: Option<Sample>,
}

/// The fleet under simulation.
pub struct Fleet<P> {
    /// The API server every agent talks to.
    pub plane: P,
    options: FleetOptions,
    nodes: Vec<SimNode>,
}

impl<P: ControlPlane> Fleet<P> {
    /// The node names, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Runs every phase against `plane` and answers them in order, the
    /// fleet stopped, with the plane for a last look.
    ///
    /// # Panics
    /// When a phase does not end within its bound (an agent failing to
    /// start, say), with what it waited for.
    pub async fn simulate(plane: P, options: FleetOptions) -> (P, Vec<String>, Vec<Phase>) {
        let mut fleet = Self {
            plane,
            options,
            nodes: Vec::new(),
        };
        let mut phases = vec![fleet.start().await, fleet.at_rest("at rest").await];
        phases.push(fleet.config_change().await);
        if let Some(policy) = fleet.options.policy.clone() {
            phases.push(fleet.policy_rollout(policy).await);
        }
        phases.push(fleet.brake(true).await);
        phases.push(fleet.brake(false).await);
        phases.push(fleet.restart_all().await);
        phases.push(fleet.at_rest("after the restart").await);
        phases.push(fleet.api_restart().await);
        let names = fleet.node_names();
        for node in &mut fleet.nodes {
            node.agent = None;
        }
        (fleet.plane, names, phases)
    }

    /// A phase begins.
    fn begin(&self) -> Start {
        Start {
            at: Instant::now(),
            mark: self.plane.request_count(),
            sample: self.plane.usage(),
        }
    }

    /// Waits until no agent has written since `start` for the options'
    /// `quiet`.
    async fn quiet(&self, start: &Start) {
        if self.options.quiet.is_zero() {
            return;
        }
        loop {
            let requests = self.plane.requests_since(start.mark);
            let last = (requests.iter().filter(|r| r.method != "GET"))
                .map(|r| r.at)
                .max()
                .unwrap_or(start.at);
            let due = last + self.options.quiet;
            if Instant::now() >= due {
                return;
            }
            assert!(
                start.at.elapsed() < LIMIT,
                "the agents never stopped writing"
            );
            // A window without writes, not a wait for an event.
            tokio::time::sleep_until(due.into()).await;
        }
    }

    /// The phase `name` that began at `start` ends.
    fn phase(&self, name: &'static str, start: &Start) -> Phase {
        let elapsed = start.at.elapsed();
        let server = (start.sample.as_ref())
            .zip(self.plane.usage())
            .map(|(before, after)| before.until(&after));
        Phase {
            name,
            nodes: self.nodes.len(),
            began: start.at,
            elapsed,
            requests: self.plane.requests_since(start.mark),
            server,
            open_watches: None,
            agents: Vec::new(),
            reached: None,
        }
    }

    fn spawn(&self, node: &SimNode) -> AgentProcess {
        let spread = format!(
            "--config-spread={}ms",
            self.options.config_spread.as_millis()
        );
        AgentProcess::start_with(
            &self.options.binary,
            &node.name,
            &node.files,
            &node.kubeconfig,
            CONFIG,
            &[&spread],
        )
    }

    /// Waits until the plane meets `condition`; an agent that exits
    /// meanwhile ends the wait with its log (a wave waiting for it would
    /// only reach the limit).
    async fn until(&self, what: &str, condition: impl Fn(&P) -> bool) {
        self.plane
            .until(LIMIT, what, |s| {
                self.assert_agents_run();
                condition(s)
            })
            .await;
    }

    /// Panics with the log of an agent that exited.
    fn assert_agents_run(&self) {
        for node in &self.nodes {
            if let Some(agent) = &node.agent
                && !agent.alive()
            {
                panic!("{}'s agent exited:\n{}", node.name, agent.logs());
            }
        }
    }

    /// Waits until `n` agents since `mark` have opened their pod watch (the
    /// first pod list is done) and read their `VigilNodeStatus`.
    async fn until_started(&self, what: &str, mark: usize, n: usize) {
        self.until(what, |s| {
            let pod_watches =
                s.count_since(mark, |r| r.is_watch() && r.uri.starts_with("/api/v1/pods?"));
            let status_reads = s.count_since(mark, |r| {
                r.method == "GET" && r.uri.contains("/vigilnodestatuses/")
            });
            pod_watches >= n && status_reads >= n
        })
        .await;
    }

    /// Nodes, pods and agents appear, wave by wave; ends once every agent
    /// has published its status objects.
    async fn start(&mut self) -> Phase {
        let start = self.begin();
        let mut waves: Vec<std::ops::Range<usize>> = (0..self.options.nodes)
            .step_by(self.wave())
            .map(|first| first..(first + self.wave()).min(self.options.nodes))
            .collect();
        if self.options.warm_cache {
            waves = std::iter::once(0..1)
                .chain(waves.into_iter().map(|w| w.start.max(1)..w.end))
                .filter(|w| !w.is_empty())
                .collect();
        }
        for wave in waves {
            if wave.start > 0 {
                self.until_started("a wave started", start.mark, wave.start)
                    .await;
            }
            if wave.start == 1 && self.options.warm_cache {
                self.until_published(&self.node_names()).await;
            }
            let names: Vec<String> = wave.map(|i| format!("sim-{i:04}")).collect();
            self.plane
                .put("nodes", names.iter().map(|n| objects::node(n)).collect());
            let pods = names.iter().flat_map(|name| {
                (0..PODS).map(move |p| {
                    let namespace = ["shop", "batch"][p % 2];
                    objects::best_effort_pod(name, namespace, &format!("{name}-{p}"), 30)
                })
            });
            self.plane.put("pods", pods.collect());
            let kubeconfigs = self.plane.agent_kubeconfigs(&names);
            for (name, kubeconfig) in names.into_iter().zip(kubeconfigs) {
                let files = NodeFiles::default();
                if let Some(first) = self.nodes.first().filter(|_| self.options.warm_cache) {
                    copy_files(&first.files.path("state/cache"), &files.path("state/cache"));
                }
                let mut node = SimNode {
                    name,
                    files,
                    kubeconfig,
                    agent: None,
                };
                node.agent = Some(self.spawn(&node));
                self.nodes.push(node);
            }
        }
        self.until_started("every agent started", start.mark, self.nodes.len())
            .await;
        self.until_published(&self.node_names()).await;
        self.quiet(&start).await;
        self.phase("start", &start)
    }

    /// Waits until each of `names` has published its status objects: its
    /// `VigilNodeStatus`, saying it runs the config the API server assigns
    /// (not a checkpoint: an agent throttled at start reads its config
    /// late), and one `VigilPolicyStatus` per policy it lists.
    async fn until_published(&self, names: &[String]) {
        self.until("every node's status objects", |s| {
            names.iter().all(|n| {
                let Some(node) = s.get("vigilnodestatuses", n) else {
                    return false;
                };
                if node["status"]["config"]["state"] == "CheckpointInUse" {
                    return false;
                }
                let policies = node["status"]["policies"].as_array().cloned();
                policies.is_some_and(|p| {
                    p.iter()
                        .filter_map(Value::as_str)
                        .all(|p| s.get("vigilpolicystatuses", &format!("{n}.{p}")).is_some())
                })
            })
        })
        .await;
    }

    /// Nothing happens for `rest`: what a fleet at rest costs (and what
    /// the phase before left to do).
    async fn at_rest(&mut self, name: &'static str) -> Phase {
        let start = self.begin();
        let before: Vec<AgentUse> = self.agents().map(AgentProcess::usage).collect();
        // A measurement window, not a wait for an event.
        tokio::time::sleep(self.options.rest).await;
        self.assert_agents_run();
        let open = self.plane.open_watches();
        let mut phase = self.phase(name, &start);
        phase.open_watches = Some(open);
        phase.agents = self
            .agents()
            .zip(before)
            .map(|(agent, before)| {
                let after = agent.usage();
                AgentUse {
                    cpu: after.cpu.saturating_sub(before.cpu),
                    ..after
                }
            })
            .collect();
        phase
    }

    /// A cluster-wide `VigilConfig` appears; ends when every node runs it
    /// on trial and says so on its `VigilNodeStatus`.
    async fn config_change(&mut self) -> Phase {
        let start = self.begin();
        let layer = json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilConfig",
            "metadata": {"name": LAYER},
            "spec": {"config": {"evictionBurst": 2}},
        });
        self.plane.put("vigilconfigs", vec![layer]);
        let names = self.node_names();
        self.until("every node on trial of the new config", |s| {
            names.iter().all(|n| {
                s.get("vigilnodestatuses", n)
                    .is_some_and(|o| o["status"]["config"]["state"] == "Trial")
            })
        })
        .await;
        self.quiet(&start).await;
        self.phase("VigilConfig change", &start)
    }

    /// `policy` is published to a registry and a `VigilPolicy` names it;
    /// ends when every node reports it pulled.
    async fn policy_rollout(&mut self, policy: PathBuf) -> Phase {
        let registry = OciRegistry::start();
        let cache = tempfile::tempdir().expect("a cache directory");
        let target = format!("{}/vigil/{POLICY}:1", registry.addr());
        let out = cli::run(
            &self.options.binary,
            &[
                "policy",
                "push",
                &policy.display().to_string(),
                &target,
                "--insecure",
                "--cache-dir",
                &cache.path().display().to_string(),
            ],
        );
        let reference = cli::printed(&out, "pin:");
        let start = self.begin();
        let object = json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
            "metadata": {"name": POLICY},
            "spec": {"source": {"oci": {"ref": reference, "insecure": true, "allowUnsigned": true}}},
        });
        self.plane.put("vigilpolicies", vec![object]);
        let names = self.node_names();
        self.until("every node serving the pulled policy", |s| {
            names.iter().all(|n| {
                s.get("vigilpolicystatuses", &format!("{n}.{POLICY}"))
                    .is_some_and(|o| o["status"]["pull"]["state"] == "Pulled")
            })
        })
        .await;
        self.quiet(&start).await;
        self.phase("policy rollout", &start)
    }

    /// `vigil pause`'s layer appears (`paused`) or goes; ends when every
    /// agent's `vigil_paused` gauge says so, and the writes that follow are
    /// done.
    async fn brake(&mut self, paused: bool) -> Phase {
        let start = self.begin();
        if paused {
            let layer = json!({
                "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilConfig",
                "metadata": {"name": PAUSE},
                "spec": {"pause": true, "config": {}},
            });
            self.plane.put("vigilconfigs", vec![layer]);
        } else {
            self.plane.delete("vigilconfigs", PAUSE);
        }
        let line = format!("vigil_paused {}", u8::from(paused));
        let polling = crate::wait::Polling::new(Duration::from_millis(100), LIMIT);
        let agents: Vec<&AgentProcess> = self.agents().collect();
        let check = || {
            self.assert_agents_run();
            agents
                .iter()
                .all(|a| a.metrics().lines().any(|l| l == line))
                .then_some(())
        };
        polling.until_async(&line, check, String::new).await;
        let reached = start.at.elapsed();
        self.quiet(&start).await;
        let mut phase = self.phase(if paused { "pause" } else { "resume" }, &start);
        phase.reached = Some(reached);
        phase
    }

    /// Every agent is killed and started again on its node's state, wave
    /// by wave (a DaemonSet rollout).
    async fn restart_all(&mut self) -> Phase {
        let start = self.begin();
        let wave = self.wave();
        for first in (0..self.nodes.len()).step_by(wave) {
            let last = (first + wave).min(self.nodes.len());
            for node in &mut self.nodes[first..last] {
                node.agent = None;
            }
            for i in first..last {
                let agent = self.spawn(&self.nodes[i]);
                self.nodes[i].agent = Some(agent);
            }
            self.until_started("a wave restarted", start.mark, last)
                .await;
        }
        self.quiet(&start).await;
        self.phase("restart every agent", &start)
    }

    fn wave(&self) -> usize {
        self.options.wave.max(1)
    }

    /// The running agents.
    fn agents(&self) -> impl Iterator<Item = &AgentProcess> + '_ {
        self.nodes.iter().filter_map(|n| n.agent.as_ref())
    }

    /// The API server restarts; ends when every agent watches again. The
    /// server's account is the new process's, from its start.
    async fn api_restart(&mut self) -> Phase {
        let mut start = self.begin();
        let names = self.node_names();
        self.plane.restart(&names, LIMIT).await;
        start.sample = start.sample.map(|_| Sample::default());
        self.quiet(&start).await;
        self.phase("API server restart", &start)
    }
}

/// Copies the files of directory `from` (not its subdirectories) into `to`.
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("a directory");
    for entry in std::fs::read_dir(from).expect("a directory") {
        let entry = entry.expect("an entry");
        if entry.file_type().expect("a type").is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("a copy");
        }
    }
}
