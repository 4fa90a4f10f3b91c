//! Builds the default policies from source as wasm components, to embed them
//! in the binary (see `src/policy/builtin.rs`).

use vigil_build_support::{Guest, build_guests};

const POLICIES: [(&str, &str); 3] = [
    ("VIGIL_BUILTIN_MEMORY_PRESSURE", "memory-pressure"),
    ("VIGIL_BUILTIN_DEFAULT_SORTER", "default-sorter"),
    ("VIGIL_BUILTIN_DEFAULT_MERGER", "default-merger"),
];

fn main() {
    let dirs: Vec<String> = POLICIES
        .iter()
        .map(|(_, p)| format!("policies/{p}"))
        .collect();
    let guests: Vec<Guest<'_>> = POLICIES
        .iter()
        .zip(&dirs)
        .map(|((_, package), dir)| Guest {
            dir,
            package,
            is_bin: false,
            features: &[],
        })
        .collect();
    // Shared by the policies; cargo's nested build notices a change there too.
    println!("cargo:rerun-if-changed=../policies/policy-kit");
    let artifacts = build_guests(&guests);
    for ((var, _), path) in POLICIES.iter().zip(artifacts) {
        println!("cargo:rustc-env={var}={}", path.display());
    }
}
