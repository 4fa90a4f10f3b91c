//! Host bindings for the three worlds of `vigil:policy@0.1.0`, the previous
//! contract but one (frozen in `wit/0.1.0/`). The agent still serves
//! components built for it, adapting their records to and from 0.2.0's in
//! [`crate::policy`]'s adapter; nothing else speaks these types.
#![allow(missing_docs)]

/// The 0.1.0 `eviction-strategy` world.
pub(crate) mod strategy {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "eviction-strategy",
    });
}

/// The 0.1.0 `candidate-sorter` world.
pub(crate) mod sorter {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "candidate-sorter",
        with: {
            "vigil:policy/types@0.1.0": super::strategy::vigil::policy::types,
            "vigil:policy/log@0.1.0": super::strategy::vigil::policy::log,
        },
    });
}

/// The 0.1.0 `config-merger` world.
pub(crate) mod merger {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "config-merger",
        with: {
            "vigil:policy/log@0.1.0": super::strategy::vigil::policy::log,
        },
    });
}
