//! Builds the default policies from source as wasm components, to embed them
//! in the binary (see `src/policy/builtin.rs`).

use vigil_build_support::{Guest, build_guests};

/// `(environment variable, crate directory, package, feature)` of each built-in.
const POLICIES: [(&str, &str, &str, &str); 12] = [
    (
        "VIGIL_BUILTIN_MEMORY_PRESSURE",
        "policies/node-pressure",
        "node-pressure",
        "memory",
    ),
    (
        "VIGIL_BUILTIN_DISK_PRESSURE",
        "policies/node-pressure",
        "node-pressure",
        "disk",
    ),
    (
        "VIGIL_BUILTIN_PID_PRESSURE",
        "policies/node-pressure",
        "node-pressure",
        "pid",
    ),
    (
        "VIGIL_BUILTIN_PSI_PRESSURE",
        "policies/node-pressure",
        "node-pressure",
        "psi",
    ),
    (
        "VIGIL_BUILTIN_RSS_OVERUSE",
        "policies/katalyst",
        "katalyst-strategies",
        "rss-overuse",
    ),
    (
        "VIGIL_BUILTIN_NUMA_PRESSURE",
        "policies/katalyst",
        "katalyst-strategies",
        "numa-pressure",
    ),
    (
        "VIGIL_BUILTIN_SYSTEM_MEMORY_PRESSURE",
        "policies/katalyst",
        "katalyst-strategies",
        "system-memory-pressure",
    ),
    (
        "VIGIL_BUILTIN_SYSTEM_CPU_PRESSURE",
        "policies/katalyst",
        "katalyst-strategies",
        "system-cpu-pressure",
    ),
    (
        "VIGIL_BUILTIN_ROOTFS_PRESSURE",
        "policies/katalyst",
        "katalyst-strategies",
        "rootfs-pressure",
    ),
    (
        "VIGIL_BUILTIN_RECLAIMED_RESOURCES",
        "policies/katalyst",
        "katalyst-strategies",
        "reclaimed-resources",
    ),
    (
        "VIGIL_BUILTIN_DEFAULT_SORTER",
        "policies/default-sorter",
        "default-sorter",
        "",
    ),
    (
        "VIGIL_BUILTIN_DEFAULT_MERGER",
        "policies/default-merger",
        "default-merger",
        "",
    ),
];

fn main() {
    revision();
    let features: Vec<Vec<&str>> = POLICIES
        .iter()
        .map(|(_, _, _, f)| if f.is_empty() { vec![] } else { vec![*f] })
        .collect();
    let guests: Vec<Guest<'_>> = POLICIES
        .iter()
        .zip(&features)
        .map(|((_, dir, package, _), features)| Guest {
            dir,
            package,
            is_bin: false,
            features,
        })
        .collect();
    // Shared by the policies; cargo's nested build notices a change there too.
    println!("cargo:rerun-if-changed=../policies/policy-kit");
    println!("cargo:rerun-if-changed=../policies/katalyst");
    let artifacts = build_guests(&guests);
    for ((var, ..), path) in POLICIES.iter().zip(artifacts) {
        println!("cargo:rustc-env={var}={}", path.display());
    }
}

/// Names the source this build is made from, for the module version its
/// precompiled artifacts are bound to: `$VIGIL_BUILD_ID` if set (builds
/// from a tarball), else the git commit, else `source`.
fn revision() {
    println!("cargo:rerun-if-env-changed=VIGIL_BUILD_ID");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let revision = match std::env::var("VIGIL_BUILD_ID") {
        Ok(id) if !id.is_empty() => id,
        _ => match git(&["rev-parse", "--short=12", "HEAD"]) {
            Some(commit) => {
                // A new commit (or a switch) must rebuild with its id: HEAD
                // moves, or the branch it names (loose or packed). Other refs
                // (a tag made, a fetch) do not rebuild.
                let mut watched = vec!["HEAD".to_owned()];
                if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    watched.extend([branch, "packed-refs".to_owned()]);
                }
                for path in watched {
                    let file = git(&["rev-parse", "--git-path", &path]);
                    if let Some(file) = file.filter(|f| std::path::Path::new(f).exists()) {
                        println!("cargo:rerun-if-changed={file}");
                    }
                }
                commit
            }
            None => "source".to_owned(),
        },
    };
    println!("cargo:rustc-env=VIGIL_BUILD_REVISION={revision}");
}
