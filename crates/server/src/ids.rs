//! Response ids (`cmpl-…`, `chatcmpl-…`) and `created` timestamps.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `prefix` followed by 32 random-looking hex digits, unique within the process.
pub fn new_id(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut a = std::collections::hash_map::RandomState::new().build_hasher();
    a.write_u64(n);
    a.write_u128(now_nanos());
    let hi = a.finish();
    let mut b = std::collections::hash_map::RandomState::new().build_hasher();
    b.write_u64(hi ^ n);
    let id = format!("{prefix}{hi:016x}{:016x}", b.finish());
    crate::request_log::note_id(&id);
    id
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_unique_and_prefixed() {
        let a = super::new_id("cmpl-");
        let b = super::new_id("cmpl-");
        assert_ne!(a, b);
        assert!(a.starts_with("cmpl-") && a.len() == 5 + 32);
    }
}
