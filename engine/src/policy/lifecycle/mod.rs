//! The lifecycle of versions: the registry of what serves, with trial,
//! last-known-good and rollback (`registry`, its state on disk in
//! `state`), the built-in versions (`builtin`), and the reloader that
//! follows the policies directory (`reload`).

pub(crate) mod builtin;
pub(in crate::policy) mod registry;
pub(crate) mod reload;
pub(in crate::policy) mod state;
pub use builtin::{BUILTINS, builtin};
pub use reload::{Reloader, ScanReport};
