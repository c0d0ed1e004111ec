use resilience_runtime::{breaker, downgrade};

#[downgrade(point = "ui.key.f64", default, key = score)]
fn by_score(score: f64) -> u32 {
    score as u32
}

struct Opaque;

#[breaker(point = "ui.key.opaque", default, key = value)]
async fn by_opaque(value: Opaque) -> u32 {
    let _ = value;
    1
}

fn main() {
    by_score(1.0);
    let _ = by_opaque(Opaque);
}
