//! A test cluster of one, for vigil's end-to-end tests and benchmarks:
//! [`ApiServer`], a Kubernetes API server subset over real HTTP on loopback
//! (driven by a real `kube::Client`); [`NodeFiles`], a node's kernel files
//! (procfs and a cgroup v2 hierarchy) laid out in a temporary directory;
//! [`objects`] to build the Pods and Node the agent sees; [`AgentProcess`],
//! a `vigil agent` process wired to all of them; [`OciRegistry`], a real
//! OCI registry on loopback to publish policies to; [`cli`], the
//! binary's other commands and the keys they sign with; and [`fleet`], a
//! simulated fleet of agents whose API cost is counted phase by phase, on
//! the test server or the upstream one; and
//! [`upstream`], the real Kubernetes control plane built from its Go modules,
//! for what only the real thing can tell.

mod agent;
mod apiserver;
pub mod cli;
pub mod fleet;
mod node;
pub mod objects;
mod registry;
pub mod upstream;
pub mod wait;

pub use agent::{AgentProcess, AgentUse};
pub use apiserver::{Access, ApiServer, Key, Request, Selector};
pub use node::NodeFiles;
pub use registry::{OciRegistry, RegistryOptions};
