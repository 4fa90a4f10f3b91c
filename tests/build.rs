//! Builds the test guests from source (see `guests/`), for the end-to-end tests.

use vigil_build_support::{Guest, build_guests};

fn sorter(features: &'static [&'static str]) -> Guest<'static> {
    Guest {
        dir: "tests/guests/fault-sorter",
        package: "fault-sorter",
        is_bin: false,
        features,
    }
}

/// A policy built from the previous contract (`wit/0.1.0/`).
fn contract_0_1(features: &'static [&'static str]) -> Guest<'static> {
    Guest {
        dir: "tests/guests/contract-0-1",
        package: "contract-0-1",
        is_bin: false,
        features,
    }
}

/// A policy built from the contract before the current one (`wit/0.2.0/`).
fn contract_0_2(features: &'static [&'static str]) -> Guest<'static> {
    Guest {
        dir: "tests/guests/contract-0-2",
        package: "contract-0-2",
        is_bin: false,
        features,
    }
}

fn main() {
    let guests = [
        ("VIGIL_GUEST_REVERSE_SORTER", sorter(&[])),
        ("VIGIL_GUEST_ENDLESS_SORTER", sorter(&["endless"])),
        ("VIGIL_GUEST_HUNGRY_SORTER", sorter(&["hungry"])),
        ("VIGIL_GUEST_TRAP_SORTER", sorter(&["trap"])),
        ("VIGIL_GUEST_BAD_INDEX_SORTER", sorter(&["bad-index"])),
        ("VIGIL_GUEST_FLAKY_SORTER", sorter(&["flaky"])),
        ("VIGIL_GUEST_SLEEPY_SORTER", sorter(&["sleepy"])),
        ("VIGIL_GUEST_CHATTY_SORTER", sorter(&["chatty"])),
        ("VIGIL_GUEST_VERBOSE_SORTER", sorter(&["verbose"])),
        ("VIGIL_GUEST_REMEMBERING_SORTER", sorter(&["remembering"])),
        (
            "VIGIL_GUEST_SCRIPTED_STRATEGY",
            Guest {
                dir: "tests/guests/scripted-strategy",
                package: "scripted-strategy",
                is_bin: false,
                features: &[],
            },
        ),
        ("VIGIL_GUEST_0_1_STRATEGY", contract_0_1(&["strategy"])),
        ("VIGIL_GUEST_0_1_SORTER", contract_0_1(&["sorter"])),
        ("VIGIL_GUEST_0_1_MERGER", contract_0_1(&["merger"])),
        ("VIGIL_GUEST_0_2_STRATEGY", contract_0_2(&["strategy"])),
        ("VIGIL_GUEST_0_2_SORTER", contract_0_2(&["sorter"])),
        (
            "VIGIL_GUEST_NOT_A_POLICY",
            Guest {
                dir: "tests/guests/not-a-policy",
                package: "not-a-policy",
                is_bin: true,
                features: &[],
            },
        ),
    ];
    let built = build_guests(&guests.map(|(_, g)| g));
    for ((var, _), path) in guests.iter().zip(built) {
        println!("cargo:rustc-env={var}={}", path.display());
    }
}
