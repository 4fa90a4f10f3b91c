//! A directory of links to pulled policies: `NAME.wasm` to the component's
//! blob in the store, `.NAME.manifest` to its manifest's. Each link is
//! replaced in one rename, so the loader never sees half of one.

use crate::base::digest::Digest;
use crate::base::fsutil::private_dir;
use crate::base::policy_name::EXTENSION;
use crate::distribution::plan::{self, PullPlan};
use crate::distribution::pull::Pulled;
use crate::distribution::store::BlobStore;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// Which versions a set of links holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// The versions that serve, linked for the reloader.
    Serving,
    /// The versions in shadow, linked for the shadow controller.
    Shadow,
}

/// A directory of links and the plan of the pulls that keep it.
#[derive(Debug)]
pub(super) struct Links {
    pub(super) dir: PathBuf,
    pub(super) plan: PullPlan,
}

impl Links {
    /// The links in `dir`, created private if it is missing.
    pub(super) fn open(dir: PathBuf) -> std::io::Result<Self> {
        private_dir(&dir)?;
        Ok(Self {
            dir,
            plan: PullPlan::default(),
        })
    }

    /// Points `NAME.wasm` at the pulled component, and `.NAME.manifest`
    /// at its manifest in `store`.
    pub(super) fn link(
        &self,
        name: &str,
        pulled: &Pulled,
        store: &BlobStore,
    ) -> std::io::Result<()> {
        // The manifest's link first (hidden from the loader): while the
        // component's link stands, the manifest it came from is kept too, so
        // its signatures can be checked again after a restart.
        let (component, manifest) = plan::link_names(name);
        replace_link(&self.dir, &manifest, &store.path(&pulled.manifest))?;
        replace_link(&self.dir, &component, &pulled.path)
    }

    /// Removes `name`'s links; answers whether it had a component linked.
    pub(super) fn unlink(&self, name: &str) -> bool {
        let (component, manifest) = plan::link_names(name);
        let removed = std::fs::remove_file(self.dir.join(component)).is_ok();
        let _ = std::fs::remove_file(self.dir.join(manifest));
        if removed {
            tracing::warn!(
                policy = name,
                "unlinking an unsigned version its policy no longer takes"
            );
        }
        removed
    }

    /// Removes the links of policies not in `chosen`; answers whether it
    /// removed any.
    pub(super) fn unlink_others<T>(&self, lane: Lane, chosen: &BTreeMap<String, T>) -> bool {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return false;
        };
        let files: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut removed = false;
        for file in plan::unlinked(files.iter().map(String::as_str), chosen) {
            if file.ends_with(EXTENSION) {
                let policy = plan::link_policy(file);
                match lane {
                    Lane::Serving => tracing::info!(
                        policy,
                        "no VigilPolicy gives this node a version; unlinking"
                    ),
                    Lane::Shadow => tracing::info!(
                        policy,
                        "no version runs in shadow on this node any more; unlinking"
                    ),
                }
            }
            removed |= std::fs::remove_file(self.dir.join(file)).is_ok();
        }
        removed
    }

    /// The blobs the links point at.
    pub(super) fn blobs(&self) -> impl Iterator<Item = Digest> {
        self.entries().filter_map(|e| blob_of(&e.path()))
    }

    /// Removes the component links to blobs not in `verified` (made by an
    /// earlier run without a verification key).
    pub(super) fn unlink_unverified(&self, verified: &HashSet<Digest>) {
        for entry in self.entries() {
            if !entry.file_name().to_string_lossy().ends_with(EXTENSION) {
                continue;
            }
            if !blob_of(&entry.path()).is_some_and(|c| verified.contains(&c)) {
                tracing::warn!(link = %entry.path().display(), "unlinking a pulled policy no signature under the verification key covers");
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn entries(&self) -> impl Iterator<Item = std::fs::DirEntry> {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flat_map(|entries| entries.flatten())
    }
}

/// The blob a link points at.
fn blob_of(link: &Path) -> Option<Digest> {
    let target = std::fs::read_link(link).ok()?;
    Digest::from_hex(&target.file_name()?.to_string_lossy())
}

/// Points `dir/name` at `target` through a temporary link renamed over it.
fn replace_link(dir: &Path, name: &str, target: &Path) -> std::io::Result<()> {
    let link = dir.join(name);
    if std::fs::read_link(&link).is_ok_and(|current| current == target) {
        return Ok(());
    }
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, &link)
}
