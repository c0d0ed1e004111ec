// The `async fn` forms of `retry-non-result.rs`: one error at the return type, none
// about the predicate or the hedge.
use resilience_runtime::retry;

fn is_busy(e: &String) -> bool {
    e == "busy"
}

#[retry]
async fn count() -> u32 {
    1
}

#[retry(retry_if = is_busy)]
async fn count_if() -> u32 {
    1
}

#[retry(hedge = "30ms")]
async fn count_hedged() -> u32 {
    1
}

fn main() {}
