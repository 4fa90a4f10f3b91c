//! Benchmark of a node that never compiles (not a test: it prints figures
//! and asserts nothing). Run with `cargo bench -p vigil --bench
//! precompiled_memory`. The release agent runs with `--compile=never`
//! inside a memory cgroup limited to 128 MiB (cgroup v2 `memory.max`, else
//! v1 `memory.limit_in_bytes`), against the project's test API server and a
//! real OCI registry on loopback, 110 pods on its node, under memory
//! pressure in dry run. Its policies: the built-ins alone; then with the
//! example JavaScript sorter and Python strategy; then with the example Go
//! sorter — each example published with `vigil policy push`, precompiled
//! with `vigil policy precompile --push` and signed with `vigil policy sign`
//! by a native-code key made by openssl (the components themselves are
//! taken unsigned, `allowUnsigned`: memory is the question here). Each run
//! serves 1000 decision cycles (each wakes on a `memory.events` change and
//! calls the strategies and the sorter), and the cgroup's peak, anonymous
//! and file memory are printed. Where no cgroup can be made it says so and
//! prints the agent's RSS split instead.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vigil_testbed::{AgentProcess, ApiServer, NodeFiles, OciRegistry, cli, objects};

const NODE: &str = "bench-node";
const NS: &str = "bench";
const PODS: usize = 110;
const CYCLES: u64 = 1000;
const LIMIT_BYTES: u64 = 128 << 20;
/// The example policies each run loads beside the built-ins, with their
/// worlds.
const RUNS: [&[(&str, &str)]; 3] = [
    &[],
    &[("js-sorter", "sorter"), ("python-psi-strategy", "strategy")],
    &[("go-sorter", "sorter")],
];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_vigil"))
}

fn vigil(args: &[&str]) -> String {
    cli::run(binary(), args)
}

/// A memory cgroup limited to [`LIMIT_BYTES`]: its directory and whether it
/// is cgroup v2.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    /// A new cgroup under this process's own, if the kernel lets us.
    fn make() -> Option<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let attempt = |root: &str, path: &str, v2: bool| -> Option<Self> {
            let dir = Path::new(root)
                .join(path.trim_start_matches('/'))
                .join(format!("vigil-bench-{}", std::process::id()));
            std::fs::create_dir(&dir).ok()?;
            let limit = if v2 {
                "memory.max"
            } else {
                "memory.limit_in_bytes"
            };
            std::fs::write(dir.join(limit), LIMIT_BYTES.to_string()).ok()?;
            Some(Self { dir, v2 })
        };
        let unified = own.lines().find_map(|l| l.strip_prefix("0::"));
        let v1 = own.lines().find_map(|l| {
            let (_, rest) = l.split_once(':')?;
            rest.strip_prefix("memory:")
        });
        let v2_root = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .find(|r| {
                std::fs::read_to_string(format!("{r}/cgroup.controllers"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
            });
        match (v2_root, unified) {
            (Some(root), Some(path)) => attempt(root, path, true),
            _ => attempt("/sys/fs/cgroup/memory", v1?, false),
        }
    }

    /// A script that enters the cgroup, then runs vigil with its arguments.
    fn wrapper(&self, dir: &Path) -> PathBuf {
        let script = dir.join("in-cgroup.sh");
        let text = format!(
            "#!/bin/sh\necho $$ > {}\nexec {} \"$@\"\n",
            self.dir.join("cgroup.procs").display(),
            binary().display()
        );
        std::fs::write(&script, text).expect("wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        script
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    fn stat(&self, key: &str) -> f64 {
        self.read("memory.stat")
            .lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0) as f64
            / 1048576.0
    }

    /// Peak, anonymous, file and mapped-file memory, in MiB, and how often
    /// the limit was hit.
    fn report(&self) -> String {
        let mib = |text: String| text.trim().parse::<u64>().unwrap_or(0) as f64 / 1048576.0;
        let (peak, anon, file, mapped, hits) = if self.v2 {
            (
                mib(self.read("memory.peak")),
                self.stat("anon"),
                self.stat("file"),
                self.stat("file_mapped"),
                self.read("memory.events"),
            )
        } else {
            (
                mib(self.read("memory.max_usage_in_bytes")),
                self.stat("rss"),
                self.stat("cache"),
                self.stat("mapped_file"),
                format!("failcnt {}", self.read("memory.failcnt").trim()),
            )
        };
        format!(
            "cgroup v{} limited to {} MiB: peak {peak:.1} MiB; now {anon:.1} MiB anonymous, {file:.1} MiB file ({mapped:.1} mapped); {}",
            if self.v2 { 2 } else { 1 },
            LIMIT_BYTES >> 20,
            hits.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn rss(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map_or(String::new(), |v| v.trim().to_owned())
    };
    format!(
        "RSS {} ({} anonymous, {} file), peak {}",
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:"),
        field("VmHWM:")
    )
}

/// Publishes each `chosen` example, precompiled and signed; answers the
/// `VigilPolicy` objects naming them.
fn publish(
    registry: &OciRegistry,
    work: &Path,
    chosen: &[(&str, &str)],
) -> (Vec<serde_json::Value>, PathBuf) {
    let (key, public) = cli::key_pair(work, "native");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let cache = work.join("cache");
    let cache = cache.to_str().unwrap();
    let mut policies = Vec::new();
    for (name, _) in chosen {
        let file = examples.join(name).join(format!("{name}.wasm"));
        let file = file.to_str().unwrap();
        let repo = format!("{}/vigil/{name}", registry.addr());
        let pushed = vigil(&[
            "policy",
            "push",
            file,
            &format!("{repo}:1"),
            "--insecure",
            "--cache-dir",
            cache,
        ]);
        let component = cli::printed(&pushed, "pin:");
        let started = Instant::now();
        let out = vigil(&[
            "policy",
            "precompile",
            file,
            "--push",
            &format!("{repo}:1-native"),
            "--insecure",
            "--cache-dir",
            cache,
        ]);
        let artifact = cli::published(&out);
        let engine_key = cli::printed(&out, "engineKey:");
        println!(
            "{name}: precompiled and pushed in {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            out.lines().next().unwrap()
        );
        vigil(&[
            "policy",
            "sign",
            &artifact,
            "--key",
            key.to_str().unwrap(),
            "--insecure",
        ]);
        policies.push(
            serde_json::json!({"apiVersion": "vigil.dev/v1alpha1", "kind": "VigilPolicy",
            "metadata": {"name": name},
            "spec": {"source": {"oci": {"ref": component, "insecure": true, "allowUnsigned": true}},
                     "precompiled": [{"engineKey": engine_key, "ref": artifact}]}}),
        );
    }
    (policies, public)
}

/// Wakes the agent with `memory.events` changes until it has run `cycles`
/// more decision cycles; answers how long that took.
async fn cycles(agent: &AgentProcess, files: &NodeFiles, cycles: u64) -> Duration {
    let count = || agent.metric("vigil_cycle_seconds_count").unwrap_or(0.0) as u64;
    let (start, from) = (Instant::now(), count());
    while count() < from + cycles {
        files.memory_event();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(
            start.elapsed() < Duration::from_secs(1200),
            "{}",
            agent.logs()
        );
    }
    start.elapsed()
}

async fn run(examples: &[(&str, &str)]) {
    let work = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start().await;
    server.put("nodes", "", objects::node(NODE));
    let files = NodeFiles::default();
    for i in 0..PODS {
        let object = objects::best_effort_pod(NODE, NS, &format!("pod-{i}"), 0);
        let uid = object["metadata"]["uid"].as_str().expect("uid").to_owned();
        files.best_effort_pod(&uid, 10 + (i as u64 % 200));
        server.put("pods", NS, object);
    }
    files.memory_available(100);
    let registry = OciRegistry::start();
    let mut extra = vec![
        "--compile".to_owned(),
        "never".to_owned(),
        "--dry-run".to_owned(),
    ];
    let mut config = "evictionPeriodSeconds: 3600\npolicies:\n  memory-pressure:\n    config: {hard: 500Mi}\n  disk-pressure: {enabled: false}\n".to_owned();
    if !examples.is_empty() {
        let (policies, public) = publish(&registry, work.path(), examples);
        for policy in policies {
            server.put("vigilpolicies", "", policy);
        }
        extra.extend(["--native-code-key".to_owned(), public.display().to_string()]);
        for (name, _) in examples {
            config.push_str(&format!("  {name}: {{deadlineMs: 2000}}\n"));
        }
        for (name, world) in examples {
            if *world == "sorter" {
                config.push_str(&format!("sorter: {name}\n"));
            }
        }
    }
    let cgroup = Cgroup::make();
    let program = match &cgroup {
        Some(cgroup) => cgroup.wrapper(work.path()),
        None => binary().to_owned(),
    };
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let agent = AgentProcess::start(&program, NODE, &files, &server, &config, &extra);
    let start = Instant::now();
    loop {
        let metrics = agent.metrics();
        let serving = examples.iter().all(|(name, _)| {
            metrics.lines().any(|line| {
                line.starts_with(&format!("vigil_policy_state{{policy=\"{name}\","))
                    && (line.contains("state=\"active\"") || line.contains("state=\"trial\""))
                    && line.ends_with(" 1")
            })
        });
        if metrics.contains("vigil_cycle_seconds_count") && serving {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "not serving: {}",
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready = start.elapsed();
    let took = cycles(&agent, &files, CYCLES).await;
    let what = if examples.is_empty() {
        "built-ins only".to_owned()
    } else {
        let names: Vec<&str> = examples.iter().map(|(name, _)| *name).collect();
        format!("built-ins + precompiled {}", names.join(" + "))
    };
    println!(
        "{what}, --compile=never, {PODS} pods: serving after {:.1} s; {CYCLES} decision cycles in {:.1} s; compiles {}; precompiled imported {}",
        ready.as_secs_f64(),
        took.as_secs_f64(),
        agent
            .metric("vigil_policy_compiles_total")
            .unwrap_or(f64::NAN),
        agent
            .metric("vigil_policy_precompiled_total{result=\"imported\"}")
            .unwrap_or(0.0),
    );
    for (name, _) in examples {
        // One series per version.
        let prefix = format!("vigil_policy_calls_total{{name=\"{name}\",");
        let calls: f64 = (agent.metrics().lines())
            .filter(|line| line.starts_with(&prefix))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        println!("  {name}: {calls} calls");
    }
    match &cgroup {
        Some(cgroup) => println!("  {}", cgroup.report()),
        None => println!(
            "  no memory cgroup could be made here; the agent's {}",
            rss(agent.pid())
        ),
    }
    println!("  the agent's own {}", rss(agent.pid()));
    drop(agent);
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            for examples in RUNS {
                run(examples).await;
            }
        });
}
