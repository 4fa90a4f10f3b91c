//! A trap as a policy's author needs it, on one line: what trapped, and the
//! guest's functions it trapped in, by name where the component keeps a name
//! section (demangled for Rust), instead of wasmtime's multi-line backtrace
//! of addresses.

use thiserror::Error;
use wasmtime::{Trap, WasmBacktrace};

/// Frames shown, innermost first; a deeper stack ends in `…`.
const MAX_FRAMES: usize = 16;

/// A guest's trap and where it happened.
#[derive(Debug, Error)]
#[error("{trap}{frames}")]
pub(crate) struct GuestTrap {
    trap: String,
    /// `; in a ← b ← …`, or why there are no names; empty without a backtrace.
    frames: String,
}

/// The trap `error` reports, if it is one.
pub(crate) fn describe(error: &wasmtime::Error) -> Option<GuestTrap> {
    let trap = error.downcast_ref::<Trap>()?;
    let frames = error
        .downcast_ref::<WasmBacktrace>()
        .map_or(String::new(), |backtrace| {
            frames(backtrace.frames().iter().map(|f| f.func_name()))
        });
    Some(GuestTrap {
        trap: trap.to_string(),
        frames,
    })
}

/// The frames `names` (innermost first; `None` for a function without a
/// name), as the end of a trap's message.
fn frames<'a>(names: impl ExactSizeIterator<Item = Option<&'a str>>) -> String {
    let total = names.len();
    let mut shown: Vec<String> = Vec::new();
    let mut unnamed = 0;
    let mut named = 0;
    for name in names.take(MAX_FRAMES) {
        match name {
            Some(name) => {
                if unnamed > 0 {
                    shown.push(format!("({unnamed} unnamed)"));
                    unnamed = 0;
                }
                named += 1;
                shown.push(demangle(name));
            }
            None => unnamed += 1,
        }
    }
    if named == 0 {
        return match total {
            0 => String::new(),
            n => format!(" (its {n} frames are unnamed: the component keeps no name section)"),
        };
    }
    if unnamed > 0 {
        shown.push(format!("({unnamed} unnamed)"));
    }
    if total > MAX_FRAMES {
        shown.push("…".into());
    }
    format!("; in {}", shown.join(" ← "))
}

/// A Rust symbol without its hash; any other name as it is.
fn demangle(name: &str) -> String {
    rustc_demangle::try_demangle(name).map_or_else(|_| name.to_owned(), |d| format!("{d:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_names_are_demangled_and_unnamed_runs_counted() {
        let names = [
            Some("abort"),
            None,
            None,
            Some("_RNvNtCshXfaRvt2tfW_3std7process5abort"),
            Some("_ZN5trapx18helper_that_panics17h2450d7965dec267aE"),
            Some("vigil:policy/sorter@0.2.0#sort"),
            None,
        ];
        assert_eq!(
            frames(names.into_iter()),
            "; in abort ← (2 unnamed) ← std::process::abort ← trapx::helper_that_panics \
             ← vigil:policy/sorter@0.2.0#sort ← (1 unnamed)"
        );
    }

    #[test]
    fn a_component_without_names_says_so_and_a_deep_stack_is_cut() {
        assert_eq!(
            frames([None, None, None].into_iter()),
            " (its 3 frames are unnamed: the component keeps no name section)"
        );
        assert_eq!(frames(std::iter::empty()), "");
        let deep = vec![Some("f"); 40];
        let text = frames(deep.into_iter());
        assert_eq!(text.matches('f').count(), MAX_FRAMES);
        assert!(text.ends_with(" ← …"), "{text}");
    }
}
