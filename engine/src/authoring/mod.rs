//! The policy author's toolbox, the `vigil policy` command: `check`
//! loads component files exactly as the agent would and describes them,
//! [`replay`] calls one export on input given as data (`policy test`),
//! `scaffold` writes a new policy's skeleton (`policy new`), [`push`]
//! publishes a checked component to an OCI registry (`policy push`),
//! `attach` publishes a file that refers to an artifact (`policy attach`), and
//! `precompile` compiles one for the nodes (`policy precompile`). It stands
//! above the host, the config and the simulation, which it uses; nothing
//! below imports it.

pub(crate) mod attach;
pub(crate) mod check;
pub(crate) mod precompile;
pub(crate) mod push;
pub mod replay;
pub(crate) mod scaffold;
pub use check::check_bytes;
pub use push::push;
