// A sync fn that returns a future would have its future made again, never the call
// run again: `#[retry]` asks for an `async fn`.
use resilience_runtime::retry;
use std::future::Future;

#[retry(attempts = 2)]
fn fetch(id: u32) -> impl Future<Output = Result<u32, ()>> + Send {
    async move { Ok(id) }
}

fn main() {}
