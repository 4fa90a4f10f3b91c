//! The artifacts on disk: the engine and its key (`engine`), the
//! authenticated artifact cache (`cache`), the child process that
//! compiles into it (`compiler`), and component files read as untrusted
//! input (`files`).

pub(in crate::policy) mod cache;
pub(crate) mod compiler;
pub(crate) mod engine;
pub(crate) mod files;
pub use engine::{engine_key, precompile};
pub use files::DEFAULT_MAX_POLICY_BYTES;
