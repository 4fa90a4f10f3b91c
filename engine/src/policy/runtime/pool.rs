//! Pooled instances: every call gets a fresh instance, taken from slots
//! wasmtime keeps ready (the pooling allocator) rather than mapped and
//! unmapped per call, with linear memories initialised copy-on-write from
//! the artifact's own pages. A fresh instance then costs microseconds even
//! for a JavaScript or Python policy, and the guarantees of a fresh store per
//! call (no state carried over, the memory cap and deadline per call) stay.
//!
//! Only the agent's engine pools: the child compiler never instantiates,
//! and the allocation strategy does not change what is compiled.
//!
//! The pool is fixed when the engine is made, so it is sized for the most any
//! policy may need ([`PER_POLICY`]) times the calls that may run at once
//! ([`CONCURRENT_CALLS`]); [`CallSlots`] makes further calls wait their turn
//! instead of failing for want of a slot, which would count as the policy's
//! fault. A component that needs more than [`PER_POLICY`] fails to
//! instantiate, so its canary refuses it.

use std::sync::{Condvar, Mutex};
use wasmtime::{Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How much of a memory or table slot is reset in place when an instance
/// ends, rather than handed back to the kernel: the pages a call dirtied
/// (found with `PAGEMAP_SCAN` where the kernel has it, Linux 6.7+) are
/// restored from the image, so the next call on the slot takes no page
/// faults. Without this, every call faulted in the pages it touched and
/// every end unmapped them: a Rust policy's empty call cost 50 µs instead of
/// 17 µs. The price is that dirtied pages, up to this much per slot, stay
/// resident between calls.
const KEEP_RESIDENT: usize = 8 << 20;

/// Calls that may hold instances at once; more wait for one to end.
pub(crate) const CONCURRENT_CALLS: u32 = 8;

/// What one policy's instance may hold at most.
pub(crate) struct PerPolicy {
    /// Core module instances (a JavaScript or Python component has a dozen).
    pub core_instances: u32,
    /// Linear memories.
    pub memories: u32,
    /// Table elements a call may allocate.
    pub tables: u32,
    /// Elements of one table.
    pub table_elements: usize,
    /// Largest linear memory, in bytes: the largest `memoryLimitMiB` a
    /// policy may be given, so the per-call cap is what binds.
    pub memory_bytes: usize,
    /// Host metadata of the instance (`VMComponentContext` and its core
    /// instances' contexts), in bytes.
    pub metadata_bytes: usize,
}

/// The caps on one policy's instance.
pub(crate) const PER_POLICY: PerPolicy = PerPolicy {
    core_instances: 32,
    memories: 8,
    tables: 16,
    table_elements: 100_000,
    memory_bytes: 4 << 30,
    metadata_bytes: 4 << 20,
};

/// The pooling allocator, sized for [`CONCURRENT_CALLS`] calls of policies
/// within [`PER_POLICY`]. Slots are reserved address space (about 260 GiB of
/// it, most of it the memories' guard regions); pages become resident only as
/// instances touch them.
pub(crate) fn strategy() -> InstanceAllocationStrategy {
    let calls = CONCURRENT_CALLS;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(calls)
        .max_component_instance_size(PER_POLICY.metadata_bytes)
        .max_core_instances_per_component(PER_POLICY.core_instances)
        .max_memories_per_component(PER_POLICY.memories)
        .max_tables_per_component(PER_POLICY.tables)
        .total_core_instances(calls * PER_POLICY.core_instances)
        .total_memories(calls * PER_POLICY.memories)
        .total_tables(calls * PER_POLICY.tables)
        .table_elements(PER_POLICY.table_elements)
        .max_memory_size(PER_POLICY.memory_bytes)
        // Wasm stacks are for async calls, which policies do not make.
        .total_stacks(0)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .pagemap_scan(Enabled::Auto);
    InstanceAllocationStrategy::Pooling(pool)
}

/// A counting gate: at most [`CONCURRENT_CALLS`] calls hold instances.
#[derive(Debug, Default)]
pub(crate) struct CallSlots {
    busy: Mutex<u32>,
    freed: Condvar,
}

/// One call's slot, given back when dropped.
pub(crate) struct Slot<'a>(&'a CallSlots);

impl CallSlots {
    /// Waits for a free slot and takes it.
    pub(crate) fn take(&self) -> Slot<'_> {
        let mut busy = self.busy.lock().expect("call slots lock poisoned");
        while *busy >= CONCURRENT_CALLS {
            busy = self.freed.wait(busy).expect("call slots lock poisoned");
        }
        *busy += 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().expect("call slots lock poisoned") -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn no_more_calls_than_slots_hold_instances_at_once() {
        let slots = Arc::new(CallSlots::default());
        let inside = Arc::new(AtomicU32::new(0));
        let most = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..CONCURRENT_CALLS * 3)
            .map(|_| {
                let (slots, inside, most) = (slots.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _slot = slots.take();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(most.load(Ordering::SeqCst) <= CONCURRENT_CALLS);
        assert_eq!(*slots.busy.lock().unwrap(), 0, "every slot given back");
    }
}
