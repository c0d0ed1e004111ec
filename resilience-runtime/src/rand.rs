//! A tiny per-thread random source for the downgrade percentage roll.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let local = 0u8;
    let addr = &local as *const u8 as u64;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (addr ^ t.rotate_left(32)) | 1
}

/// A uniform integer in `0..n` (wyrand; `n` is small, so the modulo bias is negligible).
pub(crate) fn below(n: u64) -> u64 {
    STATE.with(|s| {
        let x = s.get().wrapping_add(0xa076_1d64_78bd_642f);
        s.set(x);
        let m = u128::from(x) * u128::from(x ^ 0xe703_7ed1_a0b4_28db);
        (((m >> 64) as u64) ^ (m as u64)) % n
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn roughly_uniform() {
        let mut hist = [0u32; 10];
        for _ in 0..100_000 {
            hist[super::below(10) as usize] += 1;
        }
        for h in hist {
            assert!((9_000..11_000).contains(&h), "{hist:?}");
        }
    }
}
