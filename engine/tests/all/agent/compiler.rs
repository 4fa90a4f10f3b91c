//! Compiling in a child process: the cache, a component that does not compile,
//! and compiles past their memory limit or deadline.

use super::*;

/// An example policy's component (built by `examples/policies/build.sh`).
fn example(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../examples/policies/{name}/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the example policies with examples/policies/build.sh",
            path.display()
        )
    })
}

/// A host whose compiles run in this package's `vigil` binary, with `memory_mib` and `deadline`.
fn child_compiling_host(
    cache: &std::path::Path,
    memory_mib: u64,
    deadline: Duration,
) -> vigil::policy::Host {
    vigil::policy::Host::new(Some(cache.to_owned()))
        .unwrap()
        .compiling_in(vigil::policy::ChildCompiler {
            program: env!("CARGO_BIN_EXE_vigil").into(),
            memory_bytes: memory_mib << 20,
            deadline,
        })
        .unwrap()
}

/// Loads `bytes` as the policy `name` through `host`, with the default limits.
fn load_with(
    host: &vigil::policy::Host,
    name: &str,
    bytes: Vec<u8>,
) -> Result<vigil::policy::Policy, vigil::policy::LoadError> {
    use vigil::policy::{Limits, Origin};
    host.load(name, bytes, Origin::Builtin, Limits::default())
}

/// The files of the cache directory with `extension`.
fn cache_files(cache: &std::path::Path, extension: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect()
}

#[test]
fn a_child_compiles_what_the_cache_lacks_and_the_artifact_is_mapped_from_the_cache() {
    use vigil::policy::CacheOutcome;
    let cache = tempfile::tempdir().unwrap();
    let host = child_compiling_host(cache.path(), 1024, COMPILING);
    let policy = load_with(&host, "c-sorter", example("c-sorter")).unwrap();
    assert_eq!(policy.cache_outcome(), CacheOutcome::Miss);
    assert!(policy.as_sorter().is_some());
    let artifacts = cache_files(cache.path(), "cwasm");
    assert_eq!(artifacts.len(), 1, "the child stored one artifact");
    // Its pages are this process's mapping of the file, not a copy.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let artifact = artifacts[0].canonicalize().unwrap();
    assert!(
        maps.contains(artifact.to_str().unwrap()),
        "{} is not mapped:\n{maps}",
        artifact.display()
    );
    // A second host finds it there and compiles nothing.
    let host = child_compiling_host(cache.path(), 1024, COMPILING);
    let again = load_with(&host, "c-sorter", example("c-sorter")).unwrap();
    assert_eq!(again.cache_outcome(), CacheOutcome::Hit);
}

#[test]
fn a_component_that_does_not_compile_in_the_child_is_invalid_with_the_reason() {
    use vigil::policy::LoadError;
    let cache = tempfile::tempdir().unwrap();
    let host = child_compiling_host(cache.path(), 1024, COMPILING);
    let error = load_with(&host, "cut", b"\0asm\x0d\0\x01\0 cut short".to_vec()).unwrap_err();
    assert!(matches!(error, LoadError::Invalid(_)), "{error:?}");
    let reason = std::error::Error::source(&error).unwrap().to_string();
    assert!(
        !reason.is_empty() && !reason.contains("it said nothing"),
        "{reason}"
    );
    assert!(cache_files(cache.path(), "cwasm").is_empty());
}

#[test]
fn a_compile_past_its_memory_limit_or_deadline_fails_that_component_only() {
    use vigil::policy::{CompileError, LoadError};
    let cache = tempfile::tempdir().unwrap();
    let load = |host: &vigil::policy::Host| load_with(host, "js-sorter", example("js-sorter"));
    // The JavaScript engine alone needs a few hundred MiB to compile.
    match load(&child_compiling_host(cache.path(), 64, COMPILING)) {
        Err(LoadError::Compile(CompileError::OutOfMemory {
            limit_mib: 64,
            detail,
        })) => assert!(!detail.is_empty()),
        other => panic!("expected running out of memory, got {other:?}"),
    }
    // And it takes seconds.
    let deadline = Duration::from_millis(100);
    match load(&child_compiling_host(cache.path(), 1024, deadline)) {
        Err(LoadError::Compile(CompileError::Deadline { deadline: d })) => assert_eq!(d, deadline),
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert!(
        cache_files(cache.path(), "mac").is_empty(),
        "nothing is vouched for"
    );
    // The limit was the JavaScript component's: a small one compiles within it.
    let host = child_compiling_host(cache.path(), 64, COMPILING);
    assert!(load_with(&host, "c-sorter", example("c-sorter")).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_whose_compile_runs_out_of_memory_is_refused_and_the_built_in_serves() {
    let (server, fixture) = test_node().await;
    std::fs::create_dir_all(fixture.path("policies")).unwrap();
    std::fs::write(
        fixture.path("policies/js-sorter.wasm"),
        example("js-sorter"),
    )
    .unwrap();
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_vigil"));
    let agent = AgentProcess::start(
        binary,
        NODE,
        &fixture,
        &server,
        CONFIG,
        &["--status-interval", "100ms", "--compile-memory-mib", "64"],
    );
    server
        .until(COMPILING, "the refused policy's status", |s| {
            policy_statuses(s)
                .get("js-sorter")
                .is_some_and(|o| o["status"]["state"] == "Failed")
        })
        .await;
    let statuses = policy_statuses(&server);
    let fault = statuses["js-sorter"]["status"]["lastFault"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(fault.contains("memory limit of 64 MiB"), "{statuses:#?}");
    assert_eq!(statuses["default-sorter"]["status"]["state"], "Active");
    assert!(agent.alive(), "{}", agent.logs());
}
