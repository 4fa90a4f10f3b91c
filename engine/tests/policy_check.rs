//! `vigil policy check`, run as the real binary.

use std::process::Command;

fn vigil(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(args)
        .output()
        .expect("vigil runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
fn builtin_policies_pass_and_name_their_world() {
    let (ok, text) = vigil(&["policy", "check", "--builtin"]);
    assert!(ok, "{text}");
    for (name, world) in [
        ("memory-pressure", "eviction-strategy"),
        ("default-sorter", "candidate-sorter"),
        ("default-merger", "config-merger"),
    ] {
        assert!(text.contains(&format!("builtin:{name}: ok")), "{text}");
        assert!(
            text.contains(&format!("world:    vigil:policy/{world}@0.1.0")),
            "{text}"
        );
    }
    assert!(
        text.contains("digest:   sha256:") && text.contains("canary call passed"),
        "{text}"
    );
}

#[test]
fn invalid_files_fail_the_check_naming_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let garbage = write("garbage.wasm", b"this is not wasm");
    let module = write("module.wasm", &wat::parse_str("(module)").unwrap());
    let (ok, text) = vigil(&["policy", "check", &garbage, &module]);
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!("{garbage}: INVALID: not a WebAssembly file")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{module}: INVALID: a core WebAssembly module, not a component"
        )),
        "{text}"
    );
    assert!(text.contains("2 component(s) failed the check"), "{text}");
}

#[test]
fn nothing_to_check_is_an_error() {
    let (ok, text) = vigil(&["policy", "check"]);
    assert!(!ok && text.contains("nothing to check"), "{text}");
}
