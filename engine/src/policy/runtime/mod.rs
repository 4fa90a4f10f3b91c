//! The runtime that calls a component: a loaded version (`component`),
//! the typed handle per world (`handle`), the bounded store each call runs
//! in (`sandbox`, with the guest's clocks and randomness in
//! `guest_env`), the adapters of the earlier contracts (`adapter`), the
//! limits and call slots (`limits`, `pool`), traps told apart
//! (`trap`), answers validated (`validate`), interests narrowed
//! (`interest`) and the canary call a version must pass (`canary`).

pub(in crate::policy) mod adapter;
pub(crate) mod canary;
pub(in crate::policy) mod component;
pub(in crate::policy) mod guest_env;
pub(in crate::policy) mod handle;
pub(in crate::policy) mod interest;
pub(in crate::policy) mod limits;
pub(in crate::policy) mod pool;
pub(in crate::policy) mod sandbox;
pub(in crate::policy) mod trap;
pub(in crate::policy) mod validate;
