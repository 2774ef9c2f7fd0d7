//! How many times each operation was called: what tests assert on (a
//! restart that makes no mutating call, a rate limit that keeps calls per
//! node where expected). Every call counts, including those that failed or
//! had a fault injected, as a cloud's API metrics would count them.

use std::sync::atomic::{AtomicU64, Ordering};

use ipam_cloud::Operation;

#[derive(Debug, Default)]
pub(crate) struct CallCounter {
    counts: [AtomicU64; Operation::ALL.len()],
}

fn slot(operation: Operation) -> usize {
    // ALL lists every operation once; position always finds it.
    Operation::ALL
        .iter()
        .position(|op| *op == operation)
        .unwrap_or_default()
}

impl CallCounter {
    pub fn record(&self, operation: Operation) {
        self.counts[slot(operation)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn calls(&self, operation: Operation) -> u64 {
        self.counts[slot(operation)].load(Ordering::Relaxed)
    }

    pub fn mutating(&self) -> u64 {
        Operation::ALL
            .into_iter()
            .filter(|op| op.is_mutating())
            .map(|op| self.calls(op))
            .sum()
    }
}
