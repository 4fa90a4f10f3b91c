//! `vigil policy new`: a working policy skeleton in Rust, C, JavaScript,
//! Python or Go for any of the three worlds — the source, the contract (`wit/`), a
//! build script that installs its toolchain from the package registries the
//! first time, a scenario that shows the policy acting in `vigil simulate`,
//! and a test (`policy check`, then `policy test` on input files against
//! expected answers). The templates live in `engine/templates/`.

use crate::base::policy_name::{DEFAULT_MERGER, PolicyName};
use crate::policy::World;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A language a skeleton can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    /// Rust, built with the `wasm32-wasip2` target.
    Rust,
    /// C, built with clang, wasi-libc and `wit-bindgen c`.
    C,
    /// JavaScript, built with componentize-js.
    Js,
    /// Python, built with componentize-py.
    Python,
    /// Go, built with the stock Go toolchain and `wit-bindgen go`.
    Go,
}

/// Why a skeleton was not written.
#[derive(Debug, Error)]
pub(crate) enum ScaffoldError {
    /// The name cannot be a policy's.
    #[error(
        "{0:?} cannot name a policy: use 1–63 lowercase letters, digits and `-`, starting with a letter"
    )]
    Name(String),
    /// The directory is there already, with files in it.
    #[error("{0} exists and is not empty; nothing was written")]
    NotEmpty(PathBuf),
    /// A file could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The contract, as this binary speaks it.
const WIT: [(&str, &str); 4] = [
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("strategy.wit", include_str!("../../../wit/strategy.wit")),
    ("sorter.wit", include_str!("../../../wit/sorter.wit")),
    ("merger.wit", include_str!("../../../wit/merger.wit")),
];

/// The WIT runtime package a Go policy's bindings import, as the examples
/// build with it (its go.mod says why it is vigil's own).
const GO_RUNTIME: [(&str, &str); 3] = [
    (
        "go-wit/go.mod",
        include_str!("../../../examples/policies/toolchain/go-wit/go.mod"),
    ),
    (
        "go-wit/wit/types/types.go",
        include_str!("../../../examples/policies/toolchain/go-wit/wit/types/types.go"),
    ),
    (
        "go-wit/wit/runtime/runtime.go",
        include_str!("../../../examples/policies/toolchain/go-wit/wit/runtime/runtime.go"),
    ),
];

macro_rules! template {
    ($path:literal) => {
        include_str!(concat!("../../templates/", $path))
    };
}

/// The source file and template of each language and world.
fn source(lang: Lang, world: World) -> (&'static str, &'static str) {
    use World::{CandidateSorter as Sorter, ConfigMerger as Merger, EvictionStrategy as Strategy};
    match (lang, world) {
        (Lang::Rust, Strategy) => ("src/lib.rs", template!("rust/strategy.rs")),
        (Lang::Rust, Sorter) => ("src/lib.rs", template!("rust/sorter.rs")),
        (Lang::Rust, Merger) => ("src/lib.rs", template!("rust/merger.rs")),
        (Lang::C, Strategy) => ("policy.c", template!("c/strategy.c")),
        (Lang::C, Sorter) => ("policy.c", template!("c/sorter.c")),
        (Lang::C, Merger) => ("policy.c", template!("c/merger.c")),
        (Lang::Js, Strategy) => ("policy.js", template!("js/strategy.js")),
        (Lang::Js, Sorter) => ("policy.js", template!("js/sorter.js")),
        (Lang::Js, Merger) => ("policy.js", template!("js/merger.js")),
        (Lang::Python, Strategy) => ("policy.py", template!("python/strategy.py")),
        (Lang::Python, Sorter) => ("policy.py", template!("python/sorter.py")),
        (Lang::Python, Merger) => ("policy.py", template!("python/merger.py")),
        (Lang::Go, Strategy) => ("policy.go", template!("go/strategy.go")),
        (Lang::Go, Sorter) => ("policy.go", template!("go/sorter.go")),
        (Lang::Go, Merger) => ("policy.go", template!("go/merger.go")),
    }
}

/// A test case of a skeleton: its input and expected answer, by name.
macro_rules! case {
    ($world:literal, $name:literal) => {
        [
            (
                concat!("test/", $name, ".input.json"),
                include_str!(concat!(
                    "../../templates/",
                    $world,
                    "/",
                    $name,
                    ".input.json"
                )),
            ),
            (
                concat!("test/", $name, ".expected.json"),
                include_str!(concat!(
                    "../../templates/",
                    $world,
                    "/",
                    $name,
                    ".expected.json"
                )),
            ),
        ]
    };
}

/// The scenario and test cases of each world: a case for every rule its
/// skeleton in `lang` demonstrates.
fn world_files(world: World, lang: Lang) -> Vec<(&'static str, &'static str)> {
    let (scenario, cases): (_, Vec<[_; 2]>) = match world {
        World::EvictionStrategy => (
            template!("strategy/scenario.yaml"),
            vec![
                case!("strategy", "evaluate"),
                case!("strategy", "calm"),
                case!("strategy", "no-signal"),
                case!("strategy", "top-victims"),
                case!("strategy", "unknown-scope"),
            ],
        ),
        World::CandidateSorter => (
            template!("sorter/scenario.yaml"),
            vec![case!("sorter", "sort"), case!("sorter", "ties")],
        ),
        World::ConfigMerger => {
            let mut cases = vec![
                case!("merger", "merge"),
                case!("merger", "null-deletes"),
                case!("merger", "not-an-object"),
            ];
            // The C skeleton merges top-level keys only.
            if lang != Lang::C {
                cases.push(case!("merger", "nested"));
            }
            (template!("merger/scenario.yaml"), cases)
        }
    };
    std::iter::once(("scenario.yaml", scenario))
        .chain(cases.into_iter().flatten())
        .collect()
}

/// A file of a skeleton.
#[derive(Debug)]
struct File {
    path: PathBuf,
    bytes: Vec<u8>,
    executable: bool,
}

/// Every file of the skeleton of `name`, with its placeholders filled in.
fn files(name: &str, world: World, lang: Lang) -> Vec<File> {
    let fill = |text: &str| {
        // What the scenario loads: the policy under the name it serves as.
        let served = if world == World::ConfigMerger {
            DEFAULT_MERGER
        } else {
            name
        };
        let serve = format!("mkdir -p serve && cp {name}.wasm serve/{served}.wasm\n");
        text.replace("__SERVE__", &serve)
            .replace("__CWORLD__", &world.name().replace('-', "_"))
            .replace(
                "__GOPACKAGE__",
                &format!("export_vigil_policy_{}", world.interface()),
            )
            .replace("__WORLD__", world.name())
            .replace("__CRATE__", &name.replace('-', "_"))
            .replace("__NAME__", name)
    };
    let text = |path: &str, template: &str, executable: bool| File {
        path: path.into(),
        bytes: fill(template).into_bytes(),
        executable,
    };
    let build = match lang {
        Lang::Rust => template!("rust/build.sh"),
        Lang::C => template!("c/build.sh"),
        Lang::Js => template!("js/build.sh"),
        Lang::Python => template!("python/build.sh"),
        Lang::Go => template!("go/build.sh"),
    };
    let (source_path, source) = source(lang, world);
    let schema = serde_json::to_string_pretty(&crate::simulate::schema::json_schema())
        .expect("the schema serialises")
        + "\n";
    let mut files = vec![
        text(source_path, source, false),
        text("build.sh", build, true),
        text("test.sh", template!("common/test.sh"), true),
        text("scenario.schema.json", &schema, false),
    ];
    files.extend(
        WIT.iter()
            .map(|(file, wit)| text(&format!("wit/{file}"), wit, false)),
    );
    files.extend(
        world_files(world, lang)
            .into_iter()
            .map(|(path, template)| text(path, template, false)),
    );
    if matches!(lang, Lang::C | Lang::Go) {
        files.push(File {
            path: "wasi_snapshot_preview1.reactor.wasm".into(),
            bytes: wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER
                .to_vec(),
            executable: false,
        });
    }
    match lang {
        Lang::Rust => files.push(text("Cargo.toml", template!("rust/Cargo.toml"), false)),
        Lang::Go => files.extend(
            GO_RUNTIME
                .iter()
                .map(|(path, source)| text(path, source, false)),
        ),
        Lang::C | Lang::Js | Lang::Python => {}
    }
    if lang != Lang::Rust {
        files.push(text(
            "toolchain.sh",
            template!("common/toolchain.sh"),
            false,
        ));
    }
    files
}

/// Writes the skeleton of policy `name` into `dir` (created; it must not hold
/// files yet) and lists what it wrote.
///
/// # Errors
/// A bad name, a directory with files in it, or a file that cannot be written.
pub(crate) fn write(
    dir: &Path,
    name: &str,
    world: World,
    lang: Lang,
) -> Result<Vec<PathBuf>, ScaffoldError> {
    if !PolicyName::parse(name).is_ok_and(|n| n.is_dns_label()) {
        return Err(ScaffoldError::Name(name.to_owned()));
    }
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(ScaffoldError::NotEmpty(dir.to_owned()));
    }
    let mut written = Vec::new();
    for file in files(name, world, lang) {
        let path = dir.join(&file.path);
        let write_error = |source| ScaffoldError::Write {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_error)?;
        }
        std::fs::write(&path, &file.bytes).map_err(write_error)?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(write_error)?;
        }
        written.push(file.path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skeletons_pin_the_toolchains_the_examples_are_built_and_tested_with() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/toolchain");
        let read = |file: &str| std::fs::read_to_string(examples.join(file)).unwrap();
        let installer = template!("common/toolchain.sh");
        let mut pins: Vec<String> = read("requirements.txt")
            .lines()
            .filter(|l| l.contains("=="))
            .map(str::to_owned)
            .collect();
        let package: serde_json::Value = serde_json::from_str(&read("package.json")).unwrap();
        for (name, version) in package["dependencies"].as_object().unwrap() {
            pins.push(format!("{name}@{}", version.as_str().unwrap()));
        }
        let cli = read("toolchain.sh")
            .lines()
            .find_map(|l| l.split_once("cargo install --quiet wit-bindgen-cli --version "))
            .map(|(_, rest)| rest.split_whitespace().next().unwrap().to_owned())
            .unwrap();
        pins.push(format!("wit-bindgen-cli --version {cli}"));
        assert_eq!(pins.len(), 5, "{pins:?}");
        for pin in &pins {
            assert!(
                installer.contains(pin.as_str()),
                "templates/common/toolchain.sh lacks {pin}"
            );
        }
        // The Rust skeleton asks for the wit-bindgen the built-ins use.
        let workspace =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
                .unwrap();
        let bindgen = workspace
            .lines()
            .find(|l| l.starts_with("wit-bindgen = "))
            .unwrap();
        assert!(template!("rust/Cargo.toml").contains(bindgen));
    }

    #[test]
    fn every_placeholder_is_filled_in_every_skeleton() {
        let worlds = [
            World::EvictionStrategy,
            World::CandidateSorter,
            World::ConfigMerger,
        ];
        for lang in [Lang::Rust, Lang::C, Lang::Js, Lang::Python, Lang::Go] {
            for world in worlds {
                let texts = files("my-policy", world, lang)
                    .into_iter()
                    .filter(|file| file.path.extension().is_none_or(|e| e != "wasm"));
                for file in texts {
                    let text = String::from_utf8_lossy(&file.bytes);
                    assert!(
                        !text.contains("__"),
                        "{lang:?} {world}: {} keeps a placeholder",
                        file.path.display()
                    );
                }
            }
        }
    }

    #[test]
    fn a_directory_with_files_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mine.txt"), "keep").unwrap();
        let error = write(dir.path(), "p", World::CandidateSorter, Lang::Rust).unwrap_err();
        assert!(matches!(error, ScaffoldError::NotEmpty(_)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
