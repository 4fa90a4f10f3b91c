//! `vigil policy compile` (hidden): the agent's child compiler, which
//! compiles the component on stdin into the artifact cache.

use crate::base::report::Chain;
use crate::policy::artifacts::compiler::{INVALID_EXIT, child_input, peak_rss_kib};
use crate::policy::{Host, LoadError};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct CompileArgs {
    /// The component's sha256, which stdin must match.
    #[arg(long)]
    digest: String,
    /// This process's memory limit.
    #[arg(long)]
    memory_limit_bytes: u64,
    /// The artifact cache to store into.
    #[arg(long)]
    cache_dir: PathBuf,
}

impl CompileArgs {
    /// The child compiler's work (see [`crate::policy::artifacts::compiler`]). A
    /// component that does not compile ends the process with [`INVALID_EXIT`].
    pub(super) fn execute(self) -> anyhow::Result<()> {
        let bytes = child_input(&self.digest, self.memory_limit_bytes)?;
        let host = Host::for_compiling(self.cache_dir)?;
        match host.compile_into_cache(&bytes) {
            Ok(()) => {
                // Only a report: the artifact is stored either way.
                if let Some(kib) = peak_rss_kib() {
                    println!("{kib}");
                }
                Ok(())
            }
            Err(error @ LoadError::Compile(_)) => Err(error.into()),
            Err(error) => {
                eprintln!("error: {}", Chain(&error));
                std::process::exit(INVALID_EXIT);
            }
        }
    }
}
