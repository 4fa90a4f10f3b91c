//! A simulated fleet, to measure what vigil costs the API server: one
//! [`ApiServer`] and N real `vigil agent` processes, each with its own node
//! files, Node object and pods, taken through the phases a fleet lives
//! through — start, at rest, a `VigilConfig` change, a policy rollout from
//! a registry, every agent restarting (a DaemonSet rollout) and a window at
//! rest after it, the API server
//! dropping every watch and forgetting its history (a restart). Each
//! [`Phase`] holds the requests the server saw while it lasted.

use crate::{AgentProcess, AgentUse, ApiServer, NodeFiles, OciRegistry, Request, cli, objects};
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
    /// The requests the API server saw meanwhile.
    pub requests: Vec<Request>,
    /// Watch streams open at its end (counted at rest only).
    pub open_watches: Option<usize>,
    /// Each agent's resident memory at its end, and the CPU time it used
    /// while it lasted (at rest only).
    pub agents: Vec<AgentUse>,
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
    agent: Option<AgentProcess>,
}

/// The fleet under simulation.
pub struct Fleet {
    /// The API server every agent talks to.
    pub server: ApiServer,
    options: FleetOptions,
    nodes: Vec<SimNode>,
}

impl Fleet {
    /// The node names, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Runs every phase and answers them in order, the fleet stopped.
    ///
    /// # Panics
    /// When a phase does not end within its bound (an agent failing to
    /// start, say), with what it waited for.
    pub async fn simulate(options: FleetOptions) -> (Vec<String>, Vec<Phase>) {
        let mut fleet = Self {
            server: ApiServer::start().await,
            options,
            nodes: Vec::new(),
        };
        let mut phases = vec![fleet.start().await, fleet.at_rest("at rest").await];
        phases.push(fleet.config_change().await);
        if let Some(policy) = fleet.options.policy.clone() {
            phases.push(fleet.policy_rollout(policy).await);
        }
        phases.push(fleet.restart_all().await);
        phases.push(fleet.at_rest("after the restart").await);
        phases.push(fleet.api_restart().await);
        let names = fleet.node_names();
        for node in &mut fleet.nodes {
            node.agent = None;
        }
        (names, phases)
    }

    /// A phase's requests from `mark` on.
    fn phase(&self, name: &'static str, began: Instant, mark: usize) -> Phase {
        Phase {
            name,
            nodes: self.nodes.len(),
            began,
            elapsed: began.elapsed(),
            requests: self.server.requests_since(mark),
            open_watches: None,
            agents: Vec::new(),
        }
    }

    fn spawn(&self, node: &SimNode) -> AgentProcess {
        let spread = format!(
            "--config-spread={}ms",
            self.options.config_spread.as_millis()
        );
        AgentProcess::start(
            &self.options.binary,
            &node.name,
            &node.files,
            &self.server,
            CONFIG,
            &[&spread],
        )
    }

    /// Waits until `n` agents since `mark` have opened their pod watch (the
    /// first pod list is done) and read their `VigilNodeStatus`.
    async fn until_started(&self, what: &str, mark: usize, n: usize) {
        self.server
            .until(LIMIT, what, |s| {
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
        let (began, mark) = (Instant::now(), self.server.request_count());
        for i in 0..self.options.nodes {
            if i > 0 && i % self.wave() == 0 {
                self.until_started("a wave started", mark, i).await;
            }
            let name = format!("sim-{i:04}");
            self.server.put("nodes", "", objects::node(&name));
            for p in 0..PODS {
                let namespace = ["shop", "batch"][p % 2];
                let pod = objects::best_effort_pod(&name, namespace, &format!("{name}-{p}"), 30);
                self.server.put("pods", namespace, pod);
            }
            let mut node = SimNode {
                name,
                files: NodeFiles::default(),
                agent: None,
            };
            node.agent = Some(self.spawn(&node));
            self.nodes.push(node);
        }
        self.until_started("every agent started", mark, self.nodes.len())
            .await;
        let names = self.node_names();
        self.server
            .until(LIMIT, "every node's status objects", |s| {
                names.iter().all(|n| {
                    let Some(node) = s.get("vigilnodestatuses", "", n) else {
                        return false;
                    };
                    let policies = node["status"]["policies"].as_array().cloned();
                    policies.is_some_and(|p| {
                        p.iter().filter_map(Value::as_str).all(|p| {
                            s.get("vigilpolicystatuses", "", &format!("{n}.{p}"))
                                .is_some()
                        })
                    })
                })
            })
            .await;
        self.phase("start", began, mark)
    }

    /// Nothing happens for `rest`: what a fleet at rest costs (and what
    /// the phase before left to do).
    async fn at_rest(&mut self, name: &'static str) -> Phase {
        let (began, mark) = (Instant::now(), self.server.request_count());
        let before: Vec<AgentUse> = self.agents().map(AgentProcess::usage).collect();
        // A measurement window, not a wait for an event.
        tokio::time::sleep(self.options.rest).await;
        let open = self.server.open_watches("");
        let mut phase = self.phase(name, began, mark);
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
        let (began, mark) = (Instant::now(), self.server.request_count());
        let layer = json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilConfig",
            "metadata": {"name": LAYER},
            "spec": {"config": {"evictionBurst": 2}},
        });
        self.server.put("vigilconfigs", "", layer);
        let names = self.node_names();
        self.server
            .until(LIMIT, "every node on trial of the new config", |s| {
                names.iter().all(|n| {
                    s.get("vigilnodestatuses", "", n)
                        .is_some_and(|o| o["status"]["config"]["state"] == "Trial")
                })
            })
            .await;
        self.phase("VigilConfig change", began, mark)
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
        let (began, mark) = (Instant::now(), self.server.request_count());
        let object = json!({
            "apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
            "metadata": {"name": POLICY},
            "spec": {"source": {"oci": {"ref": reference, "insecure": true}}},
        });
        self.server.put("vigilpolicies", "", object);
        let names = self.node_names();
        self.server
            .until(LIMIT, "every node serving the pulled policy", |s| {
                names.iter().all(|n| {
                    s.get("vigilpolicystatuses", "", &format!("{n}.{POLICY}"))
                        .is_some_and(|o| o["status"]["pull"]["state"] == "Pulled")
                })
            })
            .await;
        self.phase("policy rollout", began, mark)
    }

    /// Every agent is killed and started again on its node's state, wave
    /// by wave (a DaemonSet rollout).
    async fn restart_all(&mut self) -> Phase {
        let (began, mark) = (Instant::now(), self.server.request_count());
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
            self.until_started("a wave restarted", mark, last).await;
        }
        self.phase("restart every agent", began, mark)
    }

    fn wave(&self) -> usize {
        self.options.wave.max(1)
    }

    /// The running agents.
    fn agents(&self) -> impl Iterator<Item = &AgentProcess> + '_ {
        self.nodes.iter().filter_map(|n| n.agent.as_ref())
    }

    /// The API server forgets its history and drops every watch, as a
    /// restarted API server does; ends when every watch is open again.
    async fn api_restart(&mut self) -> Phase {
        let (began, mark) = (Instant::now(), self.server.request_count());
        self.server.restart();
        // Every watch resuming is told its version is gone (410), lists and
        // watches again: the phase ends when every agent watches its pods
        // again after a LIST, and its Node again.
        let names = self.node_names();
        self.server
            .until(LIMIT, "every agent watching again", |s| {
                let requests = s.requests_since(mark);
                names.iter().all(|node| {
                    let of = |path: &'static str| {
                        move |r: &&Request| r.uri.starts_with(path) && r.uri.contains(node.as_str())
                    };
                    let pods = || requests.iter().filter(of("/api/v1/pods?"));
                    let listed = pods().position(Request::is_list);
                    listed.is_some_and(|at| pods().skip(at).any(Request::is_watch))
                        && requests
                            .iter()
                            .filter(of("/api/v1/nodes?"))
                            .any(Request::is_watch)
                })
            })
            .await;
        self.phase("API server restart", began, mark)
    }
}
