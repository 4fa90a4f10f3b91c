//! Builds WebAssembly guest crates of this workspace from source, for use in
//! build scripts.
//!
//! The engine embeds the default policies and the end-to-end tests embed their
//! fault-injecting guests; both call [`build_guests`], which runs a nested
//! `cargo build --target wasm32-wasip2 --profile guest` into one shared target
//! directory (`target/wasm-guests`), so an unchanged guest is never rebuilt and
//! the two build scripts share compiled dependencies.
//!
//! It must not be used outside a build script: it reads the variables cargo
//! sets for build scripts and prints `cargo:` directives.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target every guest is built for.
pub const GUEST_TARGET: &str = "wasm32-wasip2";

/// A guest crate to build.
#[derive(Debug, Clone, Copy)]
pub struct Guest<'a> {
    /// Directory of the crate, relative to the workspace root.
    pub dir: &'a str,
    /// Cargo package name.
    pub package: &'a str,
    /// Whether the crate is a binary (a command component) rather than a library.
    pub is_bin: bool,
    /// Cargo features to build it with; each feature set is its own variant.
    pub features: &'a [&'a str],
}

impl Guest<'_> {
    /// File name of the component cargo writes for this guest.
    fn artifact_name(&self) -> String {
        if self.is_bin {
            format!("{}.wasm", self.package)
        } else {
            format!("{}.wasm", self.package.replace('-', "_"))
        }
    }

    /// File name the component is kept under once built, distinct per feature set.
    fn kept_name(&self) -> String {
        let features: String = self.features.iter().map(|f| format!("+{f}")).collect();
        format!("{}{features}.wasm", self.package)
    }
}

/// Builds `guests` and returns the path of each one's component, in order.
///
/// Guests without features build in one cargo invocation; each feature
/// variant builds in its own. Every component is copied aside (to
/// `target/wasm-guests/kept/`) right after its build, since all variants of a
/// crate write the same artifact.
///
/// # Panics
/// Panics (failing the build script) with cargo's output if the nested build
/// fails, adding a hint when the `wasm32-wasip2` target is not installed.
pub fn build_guests(guests: &[Guest<'_>]) -> Vec<PathBuf> {
    let root = workspace_root();
    for dir in ["wit", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    for guest in guests {
        println!("cargo:rerun-if-changed={}", root.join(guest.dir).display());
    }
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("wasm-guests");
    let out = target_dir.join(GUEST_TARGET).join("guest");

    let kept = target_dir.join("kept");
    std::fs::create_dir_all(&kept).expect("cannot create the kept-guests directory");
    let keep = |guest: &Guest<'_>| {
        let path = kept.join(guest.kept_name());
        std::fs::copy(out.join(guest.artifact_name()), &path).expect("cannot copy a built guest");
        path
    };
    let (plain, variants): (Vec<&Guest<'_>>, Vec<&Guest<'_>>) =
        guests.iter().partition(|g| g.features.is_empty());
    let mut built = std::collections::HashMap::new();
    if !plain.is_empty() {
        cargo_build(
            &root,
            &target_dir,
            &plain.iter().map(|g| g.package).collect::<Vec<_>>(),
            &[],
        );
        built.extend(plain.iter().map(|g| (g.kept_name(), keep(g))));
    }
    for guest in variants {
        cargo_build(&root, &target_dir, &[guest.package], guest.features);
        built.insert(guest.kept_name(), keep(guest));
    }
    guests
        .iter()
        .map(|g| built[&g.kept_name()].clone())
        .collect()
}

/// Runs one nested `cargo build` of `packages` for the guest target.
fn cargo_build(root: &Path, target_dir: &Path, packages: &[&str], features: &[&str]) {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root)
        .args(["build", "--profile", "guest", "--target", GUEST_TARGET])
        .arg("--target-dir")
        .arg(target_dir);
    for package in packages {
        cmd.args(["-p", package]);
    }
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    // The outer build's flags and wrappers are for the host, not for wasm.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build wasm guests: {e}"));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("may not be installed")
            || stderr.contains("can't find crate for `core`")
        {
            format!("\nhint: install the target with `rustup target add {GUEST_TARGET}`")
        } else {
            String::new()
        };
        panic!("building wasm guests failed:\n{stderr}{hint}");
    }
}

/// The workspace root: the parent of the directory holding `Cargo.lock`.
fn workspace_root() -> PathBuf {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("run from a build script"));
    manifest_dir
        .ancestors()
        .find(|dir| {
            dir.join("Cargo.lock").exists() && is_workspace_manifest(&dir.join("Cargo.toml"))
        })
        .map(Path::to_path_buf)
        .expect("build scripts run inside the vigil workspace")
}

fn is_workspace_manifest(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.contains("[workspace]"))
}
