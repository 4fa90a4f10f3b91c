//! The policy author's toolbox, the `vigil policy` command: [`check`]
//! loads component files exactly as the agent would and describes them,
//! [`replay`] calls one export on input given as data (`policy test`), and
//! [`scaffold`] writes a new policy's skeleton (`policy new`). It stands
//! above the host, the config and the simulation, which it uses; nothing
//! below imports it.

pub mod check;
pub mod replay;
pub mod scaffold;
