//! The lifecycle of versions: the registry of what serves, with trial,
//! last-known-good and rollback (`registry`, its state on disk in
//! `state`), the built-in versions ([`builtin`]), and the reloader that
//! follows the policies directory ([`reload`]).

pub mod builtin;
pub(in crate::policy) mod registry;
pub mod reload;
pub(in crate::policy) mod state;
