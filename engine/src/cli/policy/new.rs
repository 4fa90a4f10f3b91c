//! `vigil policy new`: a policy's skeleton written, and what to do next.

use crate::authoring::scaffold::{self, Lang};
use crate::policy::World;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct NewArgs {
    /// The policy's name (its file is `NAME.wasm`).
    name: String,
    /// What kind of policy.
    #[arg(long, value_enum)]
    world: Kind,
    /// The language to write it in.
    #[arg(long, value_enum)]
    lang: Lang,
    /// Where to write it (`./NAME` if not given); it must not hold files yet.
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl NewArgs {
    /// `vigil policy new`: the skeleton, and what to do next.
    pub(super) fn execute(self) -> anyhow::Result<()> {
        let (name, world, lang) = (self.name.as_str(), World::from(self.world), self.lang);
        let dir = self.dir.unwrap_or_else(|| PathBuf::from(name));
        let written = scaffold::write(&dir, name, world, lang)?;
        let article = if world.name().starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        println!(
            "wrote {article} {world} in {} files to {}:",
            written.len(),
            dir.display()
        );
        for path in &written {
            println!("  {}", path.display());
        }
        let vigil = invocation();
        let test = if vigil == "vigil" {
            "./test.sh".to_owned()
        } else {
            format!("VIGIL={vigil} ./test.sh")
        };
        println!(
            "next: cd {} && ./build.sh && {test} && {vigil} simulate scenario.yaml",
            dir.display()
        );
        if vigil != "vigil" {
            println!(
                "(vigil is not on PATH; `cargo install --path engine` in vigil's repository puts it there)"
            );
        }
        Ok(())
    }
}

/// The kind of policy `policy new` writes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Kind {
    /// An eviction strategy.
    Strategy,
    /// A candidate sorter.
    Sorter,
    /// A config merger.
    Merger,
}

impl From<Kind> for World {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Strategy => World::EvictionStrategy,
            Kind::Sorter => World::CandidateSorter,
            Kind::Merger => World::ConfigMerger,
        }
    }
}

/// How a shell runs this binary: `vigil` when that is what `PATH` finds,
/// else the binary's absolute path.
fn invocation() -> String {
    let Ok(me) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return "vigil".to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .filter_map(|dir| std::fs::canonicalize(dir.join("vigil")).ok())
            .next()
            .is_some_and(|found| found == me)
    });
    if on_path {
        "vigil".to_owned()
    } else {
        me.display().to_string()
    }
}
