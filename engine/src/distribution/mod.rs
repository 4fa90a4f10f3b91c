//! Policies as OCI artifacts: [`layout`] says what a policy artifact is (the
//! CNCF Wasm layout: its media types, its config and manifest), and
//! [`registry`] opens a client to a registry (TLS, plain HTTP only when
//! asked, credentials). The author's `vigil policy push` publishes with
//! them.

pub mod layout;
pub mod pull;
pub mod registry;
pub mod store;
